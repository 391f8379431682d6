"""The local GPUs through NVML (nvidia-ml-py), for a bot that runs on a GPU machine itself.

Gives the same :class:`~bot.core.gpu.SmiSnapshot` as the nvidia-smi path. A value NVML
cannot read becomes ``None`` with its marker kept in ``raw`` (``[N/A]``, ``[Function Not
Found]``, ``ERR!``); a failed initialisation becomes the same typed error an nvidia-smi
banner would. NVML reports host PIDs, so processes are attributed to LXC containers from
the local ``/proc/<pid>/cgroup``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from bot.core.gpu import Gpu, GpuProcess, ProcessListing, SmiError, SmiErrorKind, SmiSnapshot
from bot.core.status import attribute_from_proc

_lock = threading.Lock()
T = TypeVar("T")
MIB = 1024 * 1024

_INIT_ERRORS: tuple[tuple[str, SmiErrorKind, str], ...] = (
    ("NVMLError_LibraryNotFound", SmiErrorKind.NVML_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
    ("NVMLError_DriverNotLoaded", SmiErrorKind.DRIVER_COMMUNICATION_FAILURE, "Driver Not Loaded"),
    ("NVMLError_LibRmVersionMismatch", SmiErrorKind.NVML_DRIVER_LIBRARY_MISMATCH,
     "Driver/library version mismatch"),
)


def _error_snapshot(kind: SmiErrorKind, text: str) -> SmiSnapshot:
    return SmiSnapshot(source_format="nvml", error=SmiError(kind=kind, lines=(text,)))


def _marker(exc: pynvml.NVMLError) -> str:
    if isinstance(exc, pynvml.NVMLError_NotSupported):
        return "[Not Supported]"
    if isinstance(exc, pynvml.NVMLError_FunctionNotFound):
        return "[Function Not Found]"
    return "ERR!"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _process_name(proc_root: Path, pid: int) -> str:
    try:
        raw = (proc_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "?"


def read_local(proc_root: Path = Path("/proc")) -> SmiSnapshot:
    """Read every local GPU once (blocking; call it from a worker thread)."""
    with _lock:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            for name, kind, text in _INIT_ERRORS:
                if type(exc).__name__ == name:
                    return _error_snapshot(kind, f"Failed to initialize NVML: {text}")
            return _error_snapshot(SmiErrorKind.NVML_INIT_UNKNOWN_ERROR, f"Failed to initialize NVML: {exc}")
        try:
            return _read(proc_root)
        finally:
            pynvml.nvmlShutdown()


def _read(proc_root: Path) -> SmiSnapshot:
    driver = _text(pynvml.nvmlSystemGetDriverVersion())
    try:
        cuda_int = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        cuda: str | None = f"{cuda_int // 1000}.{cuda_int % 1000 // 10}"
    except pynvml.NVMLError:
        cuda = None
    count = int(pynvml.nvmlDeviceGetCount())
    if count == 0:
        return _error_snapshot(SmiErrorKind.NO_DEVICES_FOUND, "No devices were found")
    gpus: list[Gpu] = []
    processes: list[GpuProcess] = []
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            kind = (SmiErrorKind.DEVICE_HANDLE_GPU_LOST if isinstance(exc, pynvml.NVMLError_GpuIsLost)
                    else SmiErrorKind.DEVICE_HANDLE_UNKNOWN_ERROR)
            gpus.append(Gpu(index=index, name=None, raw={"device": _marker(exc)}))
            lost = SmiError(kind, (f"Unable to determine the device handle for GPU {index}: {exc}",))
            return SmiSnapshot("nvml", tuple(gpus), driver, cuda, error=lost)
        gpu, found = _read_device(index, handle, proc_root)
        gpus.append(gpu)
        processes.extend(found)
    entries = []  # the lines read_proc_entries prints on a node: each process's cgroup, NSpgid and stat
    for proc in processes:
        for name in ("cgroup", "status", "stat"):
            try:
                for line in (proc_root / str(proc.pid) / name).read_text().splitlines():
                    if name != "status" or line.startswith("NSpgid:"):
                        entries.append(f"{proc_root}/{proc.pid}/{name}:{line}")
            except OSError:
                continue
    with contextlib.suppress(OSError):
        entries.append(f"{proc_root}/uptime:{(proc_root / 'uptime').read_text().strip()}")
    text = "\n".join(entries)
    attributed = attribute_from_proc(tuple(processes), text)
    return SmiSnapshot("nvml", tuple(gpus), driver, cuda, process_listing=(
        ProcessListing.LISTED if processes else ProcessListing.NONE_FOUND), processes=attributed)


def _read_device(index: int, handle: Any, proc_root: Path) -> tuple[Gpu, list[GpuProcess]]:
    raw: dict[str, str] = {}

    def get(key: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except pynvml.NVMLError as exc:
            raw[key] = _marker(exc)
            return None

    memory = get("memory", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    util = get("utilization", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
    power = get("power_draw", lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
    limit = get("power_limit", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    uuid = get("uuid", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
    gpu = Gpu(
        index=index,
        name=get("name", lambda: _text(pynvml.nvmlDeviceGetName(handle))),
        memory_used_mib=int(memory.used) // MIB if memory is not None else None,
        memory_total_mib=int(memory.total) // MIB if memory is not None else None,
        utilization_pct=int(util.gpu) if util is not None else None,
        temperature_c=get("temperature", lambda: int(pynvml.nvmlDeviceGetTemperature(
            handle, pynvml.NVML_TEMPERATURE_GPU))),
        power_draw_w=power / 1000 if power is not None else None,
        power_limit_w=limit / 1000 if limit is not None else None,
        fan_pct=get("fan", lambda: int(pynvml.nvmlDeviceGetFanSpeed(handle))),
        uuid=uuid,
        raw=raw,
    )
    processes = []
    for proc in get("processes", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []:
        used = proc.usedGpuMemory
        processes.append(GpuProcess(
            pid=int(proc.pid), name=_process_name(proc_root, int(proc.pid)),
            used_mib=int(used) // MIB if used is not None else None,
            used_raw=None if used is not None else "[N/A]", gpu_index=index, gpu_uuid=uuid, type="C",
        ))
    return gpu, processes
