"""The local target through the real pynvml code, against a stand-in libnvidia-ml.so.1."""

import ctypes
import shutil
import subprocess

import pynvml
import pytest

from bot.config import parse_inventory
from bot.core.gpu import SmiErrorKind
from bot.core.inventory import resolve_targets
from bot.core.status import TargetState
from bot.nvml import read_local
from bot.status import read_status
from tests.conftest import FIXTURES


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the stand-in libnvidia-ml.so.1")
    out = tmp_path_factory.mktemp("nvml") / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(FIXTURES / "fake_nvml.c")], check=True)
    return out


@pytest.fixture
def nvml(fake_nvml_lib, tmp_path, monkeypatch):
    """Point the real pynvml at the stand-in library and a scenario file."""
    scenario = tmp_path / "nvml.txt"
    monkeypatch.setenv("FAKE_NVML_FILE", str(scenario))
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(fake_nvml_lib)))
    return scenario


def proc_tree(tmp_path, pid, cmdline, cgroup):
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(part.encode() for part in cmdline) + b"\0")
    (d / "cgroup").write_text(cgroup + "\n")
    # proc(5)'s layout: the start time (field 22, clock ticks after boot) tells this process from a later one
    (d / "stat").write_text(f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 9 3 0 0 20 0 61 0 918273 1 2 3\n")
    (tmp_path / "proc" / "uptime").write_text("12182.73 23001.50\n")
    return tmp_path / "proc"


def test_reads_gpus_processes_and_owning_containers(nvml, tmp_path):
    nvml.write_text("\n".join([
        "driver 580.126.09", "cuda 13000",
        "gpu NVIDIA RTX A6000|GPU-aaa|49140|44877|97|71|285000|300000",
        "gpu NVIDIA RTX A6000|GPU-bbb|49140|1|0|29|0|300000",
        "proc 0 48211 44876",
    ]))
    proc_root = proc_tree(tmp_path, 48211, ["python3", "-m", "sglang.launch_server"], "0::/lxc/129/ns/init.scope")
    snap = read_local(proc_root)
    assert (snap.driver_version, snap.cuda_version, len(snap.gpus)) == ("580.126.09", "13.0", 2)
    a, b = snap.gpus
    assert (a.memory_used_mib, a.memory_total_mib, a.utilization_pct, a.temperature_c) == (44877, 49140, 97, 71)
    assert (a.power_draw_w, a.power_limit_w) == (285.0, 300.0)
    assert b.power_draw_w is None and b.raw["power_draw"] == "[Not Supported]"
    assert a.fan_pct is None and a.raw["fan"] == "[Function Not Found]"  # not in this "driver"
    (proc,) = snap.processes_of(a)
    assert (proc.pid, proc.used_mib, proc.vmid, proc.name) == (48211, 44876, 129, "python3 -m sglang.launch_server")
    assert proc.started == 918273 and proc.running_s == pytest.approx(3000.0)  # up 12182.73 s, started at 9182.73
    assert snap.processes_of(b) == ()


@pytest.mark.parametrize("code, kind", [
    (9, SmiErrorKind.DRIVER_COMMUNICATION_FAILURE),
    (18, SmiErrorKind.NVML_DRIVER_LIBRARY_MISMATCH),
    (999, SmiErrorKind.NVML_INIT_UNKNOWN_ERROR),
])
def test_init_failures_are_typed_errors(nvml, code, kind):
    nvml.write_text(f"init_error {code}\n")
    snap = read_local()
    assert snap.gpus == () and snap.error is not None and snap.error.kind is kind


def test_no_devices(nvml):
    nvml.write_text("driver 580.126.09\n")
    assert read_local().error.kind is SmiErrorKind.NO_DEVICES_FOUND


async def test_local_target_in_a_status_report(nvml):
    nvml.write_text("gpu NVIDIA H100|GPU-ccc|81559|30000|0|40|100000|700000\n")
    inventory = parse_inventory({"nodes": {}}, "test")
    report = await read_status(None, inventory, resolve_targets("all", inventory, local=True))  # type: ignore[arg-type]
    (status,) = report.statuses
    assert status.target.label == "local" and status.state is TargetState.OK
    assert status.rows[0].flags == ("orphaned memory: 30000 MiB held, no process listed",)


def test_missing_library_is_reported_not_crashed(monkeypatch):
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real NVML")
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    snap = read_local()
    assert snap.error is not None and snap.error.kind is SmiErrorKind.NVML_LIBRARY_NOT_FOUND
