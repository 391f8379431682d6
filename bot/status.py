"""Use case: read the GPUs of some targets, concurrently, each within a deadline.

Slack, the CLI and the scheduler all call :func:`read_status`. One slow or dead node is
reported as unreachable at the deadline; it never delays the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from bot.core import argv as remote
from bot.core.attempts import Attempt
from bot.core.gpu import DeviceHolder, GpuProcess, SmiSnapshot
from bot.core.gpu_faults import DeviceNode, cuda_devices_health, device_nodes_from_stat, nvidia_nodes_passed
from bot.core.inventory import Inventory, Target
from bot.core.p2p import parse_p2p_matrix, peer_access_check
from bot.core.report import LEFT_RUNNING, Launch, LaunchRef, launch_key
from bot.core.smi import find_error, parse_xml, processes_from_query, read_csv, snapshot_from_query
from bot.core.status import (
    DEFAULT_THRESHOLDS,
    NVIDIA_SERVICES,
    TargetStatus,
    Thresholds,
    assess_container,
    assess_node,
    attribute_from_proc,
    container_not_read,
    gpu_device_holders,
    names_from_stat,
    unreachable,
    unreadable,
)
from bot.errors import CommandFailed, GpuopsError, ParseError, RemoteError
from bot.nvml import read_local
from bot.ssh import CommandResult
from bot.store import AttemptStore

log = logging.getLogger(__name__)


class Transport(Protocol):
    async def run(
        self, node: str, argv: remote.Argv, *, timeout_s: int | None = None, ok_exit: tuple[int, ...] = (0,)
    ) -> CommandResult: ...


@dataclass(frozen=True)
class StatusReport:
    statuses: tuple[TargetStatus, ...]
    elapsed_s: float
    # the recorded launches whose process groups hold GPU memory: (node, vmid, group) -> what to call them
    launches: dict[Launch, LaunchRef] = field(default_factory=dict)
    launches_unread: str | None = None  # why the history could not be read to name them


class SmiFailed(GpuopsError):
    """nvidia-smi answered, but with an error banner (driver gone, NVML mismatch, ...)."""

    def __init__(self, snapshot: SmiSnapshot) -> None:
        assert snapshot.error is not None
        super().__init__(snapshot.error.meaning)
        self.snapshot = snapshot


async def _smi(transport: Transport, node: str, argv: remote.Argv) -> str:
    """stdout of an nvidia-smi call; an error banner becomes :class:`SmiFailed`."""
    try:
        return (await transport.run(node, argv)).stdout
    except CommandFailed as exc:
        error = find_error(exc.stdout + "\n" + exc.stderr_tail)
        if error is not None:
            raise SmiFailed(SmiSnapshot(source_format="error", error=error)) from None
        raise


async def read_peer_access(transport: Transport, node: str, vmid: int,
                           gpus: Sequence[int] | None) -> tuple[str, str]:
    """("ok" | "warn", detail): `nvidia-smi topo -p2p r` inside a container, judged for the GPUs of those indices
    (None: every GPU the matrix lists). Unreadable is a warning, not a failure."""
    try:
        out = await transport.run(node, remote.pct_exec(vmid, remote.nvidia_smi_p2p_read()))
    except RemoteError as exc:
        return "warn", f"could not read the P2P matrix: {exc.user_message}"
    matrix = parse_p2p_matrix(out.stdout)
    return peer_access_check(matrix, sorted({a for a, _ in matrix}) if gpus is None else gpus)


async def read_device_nodes(transport: Transport, node: str, vmid: int,
                            pct_config: str | None) -> dict[str, DeviceNode] | None:
    """The NVIDIA device nodes the container's config passes, as ``stat`` finds them inside it (one it cannot find
    is absent); None when the config passes none or they could not be read."""
    paths = nvidia_nodes_passed(pct_config or "")
    if not paths:
        return None
    try:
        out = await transport.run(node, remote.pct_exec(vmid, remote.stat_device_nodes(paths)), ok_exit=(0, 1))
    except (RemoteError, ValueError) as exc:
        log.info("reading the device nodes in CT %s failed: %s", vmid, exc)
        return None
    if out.exit_status == 1 and "No such file" not in out.stderr:  # stat refused to run; nothing was looked at
        log.info("stat in CT %s: %s", vmid, out.stderr.strip()[:200])
        return None
    return device_nodes_from_stat(out.stdout)


async def read_pct_config(transport: Transport, node: str, vmid: int) -> str | None:
    """Container ``vmid``'s configuration as ``pct config`` prints it now (its RAM limit, the devices it gets); None
    when it could not be read."""
    try:
        return (await transport.run(node, remote.pct_config(vmid))).stdout
    except RemoteError as exc:
        log.info("pct config %s on %s: %s", vmid, node, exc)
        return None


async def read_dev_shm(transport: Transport, node: str, vmid: int) -> str | None:
    """``df -Pk /dev/shm`` in container ``vmid`` (where NCCL makes its shared-memory segments); None when it could not
    be read there."""
    try:
        answer = await transport.run(node, remote.pct_exec(vmid, remote.df_dev_shm()), ok_exit=(0, 1))
    except RemoteError as exc:
        log.info("df /dev/shm in CT %s on %s: %s", vmid, node, exc)
        return None
    return answer.stdout if answer.exit_status == 0 else None


async def read_cuda_devices(transport: Transport, node: str, vmid: int) -> tuple[str, str] | None:
    """The CUDA devices check of a container ("ok" | "warn" | "fail", detail): the NVIDIA nodes its config passes,
    and what they are inside it. None when its config could not be read or passes no NVIDIA node."""
    pct_config = await read_pct_config(transport, node, vmid)
    if pct_config is None:
        return None
    return cuda_devices_health(vmid, pct_config, await read_device_nodes(transport, node, vmid, pct_config))


async def read_gpus(transport: Transport, node: str, vmid: int | None = None) -> SmiSnapshot:
    """GPUs and versions, read on a node or inside a container, without processes."""

    def where(argv: remote.Argv) -> remote.Argv:
        return remote.pct_exec(vmid, argv) if vmid is not None else argv

    gpu_csv, versions_xml = await asyncio.gather(
        _smi(transport, node, where(remote.nvidia_smi_query_gpu())),
        _smi(transport, node, where(remote.nvidia_smi_versions())),
    )
    snapshot = snapshot_from_query(read_csv(gpu_csv, remote.GPU_QUERY_FIELDS))
    versions = parse_xml(versions_xml)
    return replace(
        snapshot,
        source_format="query",
        driver_version=versions.driver_version or snapshot.driver_version,
        cuda_version=versions.cuda_version,
        sample_count=None,
    )


async def read_node(transport: Transport, node: str, proc_root: str) -> SmiSnapshot:
    """The host view: GPUs, every compute process, and the container that owns each PID."""
    gpus, apps_csv = await asyncio.gather(
        read_gpus(transport, node),
        _smi(transport, node, remote.nvidia_smi_query_apps()),
    )
    apps = read_csv(apps_csv, remote.APPS_QUERY_FIELDS) if apps_csv.strip() else None
    processes, listing = processes_from_query(apps)
    pids = [p.pid for p in processes if p.pid is not None]
    if pids:
        entries = (await transport.run(node, remote.read_proc_entries(pids, proc_root), ok_exit=(0, 1, 2))).stdout
        processes = attribute_from_proc(processes, entries)
    return replace(gpus, processes=processes, process_listing=listing)


async def read_device_holders(transport: Transport, node: str, proc_root: str) -> list[DeviceHolder]:
    """Every process on the node holding a GPU's device node open, with its container, group and start time, as read
    now; NVIDIA's own services (which hold every GPU open by design) left out. The processes nvidia-smi lists are
    among them too: the caller tells them apart."""
    found = gpu_device_holders((await transport.run(node, remote.nvidia_device_holders(proc_root),
                                                    ok_exit=(0, 1))).stdout, proc_root)
    if not found:
        return []
    entries = (await transport.run(node, remote.read_proc_entries(found, proc_root), ok_exit=(0, 1, 2))).stdout
    names = names_from_stat(entries)  # a process that ended meanwhile has none: it holds nothing now
    processes = attribute_from_proc(tuple(GpuProcess(pid, names[pid], None) for pid in found
                                          if pid in names and names[pid] not in NVIDIA_SERVICES), entries)
    return [DeviceHolder(p, found[p.pid]) for p in processes if p.pid is not None]


async def read_target(transport: Transport, inventory: Inventory, target: Target, limits: Thresholds) -> TargetStatus:
    """A target's GPUs; for a container also its CUDA devices check, read alongside (a container whose nvidia-smi
    cannot run is where a device missing inside it shows)."""
    if target.kind != "container":
        return await read_target_gpus(transport, inventory, target, limits)
    assert target.vmid is not None
    status, devices = await asyncio.gather(read_target_gpus(transport, inventory, target, limits),
                                           read_cuda_devices(transport, target.node, target.vmid),
                                           return_exceptions=True)
    if isinstance(status, BaseException):
        raise status
    if isinstance(devices, BaseException):
        log.info("the CUDA devices check of %s failed: %s", target.label, devices)
        devices = None
    return replace(status, devices=devices)


async def read_target_gpus(transport: Transport, inventory: Inventory, target: Target,
                           limits: Thresholds) -> TargetStatus:
    """A target's GPUs alone (for a container: read inside it, its processes from the node's view)."""
    if target.kind == "local":
        return assess_node(target, await asyncio.to_thread(read_local), limits)
    node = inventory.node(target.node)
    try:
        if target.kind == "node":
            return assess_node(target, await read_node(transport, target.node, node.proc_root), limits)
        assert target.vmid is not None
        inside, host = await asyncio.gather(
            read_gpus(transport, target.node, target.vmid),
            read_node(transport, target.node, node.proc_root),
            return_exceptions=True,
        )
        if isinstance(inside, BaseException):
            raise inside
        if isinstance(host, BaseException) and not isinstance(host, RemoteError | ParseError | SmiFailed):
            raise host
        # a failed host read leaves the container's own answer; its processes are just not visible
        return assess_container(target, inside, host if isinstance(host, SmiSnapshot) else None, limits)
    except SmiFailed as exc:
        return assess_node(target, exc.snapshot, limits)
    except CommandFailed as exc:
        if exc.argv[:2] == ("pct", "exec"):
            return container_not_read(target, exc.stderr_tail)
        return unreadable(target, exc.user_message)
    except RemoteError as exc:
        return unreachable(target, exc.user_message)
    except ParseError as exc:
        return unreadable(target, f"nvidia-smi output not understood: {exc.user_message}")


async def read_status(
    transport: Transport,
    inventory: Inventory,
    targets: list[Target],
    *,
    limits: Thresholds = DEFAULT_THRESHOLDS,
    deadline_s: float = 12.0,
) -> StatusReport:
    started = time.monotonic()

    async def bounded(target: Target) -> TargetStatus:
        t0 = time.monotonic()
        try:
            status = await asyncio.wait_for(read_target(transport, inventory, target, limits), deadline_s)
        except TimeoutError:
            return unreachable(target, f"no answer within {deadline_s:g}s", time.monotonic() - t0)
        return replace(status, elapsed_s=time.monotonic() - t0)

    statuses = await asyncio.gather(*(bounded(t) for t in targets))
    return StatusReport(tuple(statuses), time.monotonic() - started)


def report_record(report: StatusReport) -> dict[str, str]:
    """A compact, secret-free summary for the audit stream."""
    return {
        "targets": ",".join(s.target.label for s in report.statuses),
        "result": ",".join(f"{s.target.label}={s.state.value}" for s in report.statuses),
        "elapsed_s": f"{report.elapsed_s:.2f}",
    }


async def running_launches(attempts: AttemptStore) -> dict[Launch, Attempt]:
    """The recorded launches still running, by (node, container, process group there): a launch starts in a
    session of its own, so its PID inside the container is the group of every process it starts. A failed launch
    whose server was left running (:attr:`Attempt.left_running`) is one, however old."""
    return {key: a for a in await attempts.holding_servers() if (key := launch_key(a.node, a.vmid, a.pid)) is not None}


async def launch_refs(attempts: AttemptStore) -> dict[Launch, LaunchRef]:
    """The recorded launches still running, as /gpu status names their processes (:func:`running_launches`)."""
    return {key: launch_ref(a) for key, a in (await running_launches(attempts)).items()}


async def launch_refs_if_read(attempts: AttemptStore) -> dict[Launch, LaunchRef]:
    """:func:`launch_refs`, or none when the history cannot be read: a GPU's holders are then named by PID alone
    (the pre-flight's and the triage's reading of the GPUs must not fail for it)."""
    try:
        return await launch_refs(attempts)
    except GpuopsError as exc:
        log.warning("GPU holders not matched to launches: %s", exc.user_message)
        return {}


def launch_ref(attempt: Attempt) -> LaunchRef:
    status = LEFT_RUNNING if attempt.left_running else attempt.status.value
    return LaunchRef(attempt.id, status, attempt.port)


async def with_launches(report: StatusReport, attempts: AttemptStore) -> StatusReport:
    """The report, with the recorded launches still running, so that each GPU process in one of their process
    groups is shown as that launch's. The history unreadable: the GPUs are still shown, unnamed."""
    try:
        running = await running_launches(attempts)
    except GpuopsError as exc:
        log.warning("GPU processes not matched to launches: %s", exc.user_message)
        return replace(report, launches_unread=exc.user_message)
    return replace(report, launches={key: launch_ref(a) for key, a in running.items()})

