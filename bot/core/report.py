"""The data a status answer renders: plain values and monospace lines, no Slack, no I/O.

Slack (Block Kit) and the terminal render the same :class:`TargetView`, so both say the same.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bot.core.gpu import Gpu, GpuProcess, ProcessListing, SmiSnapshot
from bot.core.status import ORPHANED_FLAG, GpuRow, ProcessView, TargetState, TargetStatus

BAR_WIDTH = 10
Launch = tuple[str, int, int]  # a recorded launch by (node, container, its process group there)
LEFT_RUNNING = "failed, left running"  # a LaunchRef's status: a failed launch whose server was left running


@dataclass(frozen=True)
class LaunchRef:
    """The recorded launch a GPU process belongs to, as the status names it."""

    attempt: str
    status: str
    port: int

    @property
    def label(self) -> str:
        return f"{self.attempt} ({self.status}, port {self.port})"


@dataclass(frozen=True)
class TargetView:
    title: str
    state: str  # ok | attention | unreachable | smi-error | unreadable | stopped | no-container
    summary: str  # driver / CUDA / GPU count, or the problem
    gpu_lines: tuple[str, ...]
    flag_lines: tuple[str, ...]
    process_title: str
    process_lines: tuple[str, ...]
    detail_lines: tuple[str, ...]  # error banner lines, etc.


def bar(used: int | None, total: int | None, width: int = BAR_WIDTH) -> str:
    if used is None or not total:
        return "?" * width
    filled = min(width, round(width * used / total))
    return "█" * filled + "░" * (width - filled)


def _cell(value: object | None, raw: str | None, suffix: str = "") -> str:
    if value is None:
        return raw or "n/a"
    if isinstance(value, float):
        value = round(value)
    return f"{value}{suffix}"


def gpu_line(gpu: Gpu) -> str:
    if gpu.memory_used_mib is not None and gpu.memory_total_mib is not None:
        memory = f"{bar(gpu.memory_used_mib, gpu.memory_total_mib)} {gpu.memory_used_mib:>6}/{gpu.memory_total_mib} MiB"
    else:
        memory = f"{bar(None, None)} {gpu.raw.get('memory') or gpu.raw.get('memory_used') or 'n/a':>16}"
    name = (gpu.name or "?").removeprefix("NVIDIA ")
    draw = _cell(gpu.power_draw_w, gpu.raw.get("power_draw"))
    power = f"{draw}/{_cell(gpu.power_limit_w, gpu.raw.get('power_limit'))} W"
    return (
        f"{gpu.index:>3}  {name[:20]:<20} {memory:<33} "
        f"{_cell(gpu.utilization_pct, gpu.raw.get('utilization'), '%'):>5} "
        f"{_cell(gpu.temperature_c, gpu.raw.get('temperature'), '°C'):>6}  {power}"
    )


GPU_HEADER = f"{'GPU':>3}  {'NAME':<20} {'MEMORY':<33} {'UTIL':>5} {'TEMP':>6}  POWER"
PROCESS_HEADER = f"{'GPU':>3}  {'PID':>8}  {'CT':>5}  {'MiB':>7}  PROCESS"


def age_text(seconds: float) -> str:
    """A span as people say it: 40 s, 12 min, 3.2 h, 4.1 days."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def process_lines(rows: tuple[GpuRow, ...], node: str = "", launches: Mapping[Launch, LaunchRef] | None = None
                  ) -> list[str]:
    """One line per GPU process, with how long it has run when the node's /proc told (yesterday's leftover reads
    apart from a server started a minute ago); one in a recorded launch's process group (its PID inside the
    container is the launch's, as ``setsid`` made it) is named after that launch."""
    lines = []
    for row in rows:
        for p in row.processes:
            used = str(p.used_mib) if p.used_mib is not None else (p.used_raw or "n/a")
            ct = str(p.vmid) if p.vmid is not None else "host"
            line = f"{row.gpu.index:>3}  {p.pid if p.pid is not None else '?':>8}  {ct:>5}  {used:>7}  {p.name}"
            if p.running_s is not None:
                line += f"  (up {age_text(p.running_s)})"
            launch = launch_of(p, node, launches or {})
            lines.append(f"{line}  <- {launch.label}" if launch else line)
    return lines


def launch_key(node: str, vmid: int | None, group: int | None) -> Launch | None:
    """A GPU process's key among the recorded launches; none outside a container or without a known group."""
    return None if vmid is None or group is None else (node, vmid, group)


def launch_of(process: GpuProcess, node: str, launches: Mapping[Launch, LaunchRef]) -> LaunchRef | None:
    """The recorded launch whose process group ``process`` (a GPU process on ``node``) is in, if any."""
    key = launch_key(node, process.vmid, process.group)
    return None if key is None else launches.get(key)


@dataclass(frozen=True)
class MemoryHolders:
    """What holds memory on some GPUs of a node, as the launch pre-flight, the budget and the triage name it."""
    lines: tuple[str, ...]  # "GPU 0: PID 4242 (CT 129) python3 38095 MiB <- a2026... (ready, port 30000)"
    launches: tuple[tuple[str, str], ...]  # the recorded launches among the holders: (attempt id, label)
    others: bool  # memory held by a process no recorded launch owns, or by none listed (orphaned)


def memory_holders(host: SmiSnapshot, uuids: Collection[str], node: str, launches: Mapping[Launch, LaunchRef],
                orphaned_mib: int) -> MemoryHolders:
    """Who holds memory on the GPUs of ``host`` (the node's reading) whose UUID is in ``uuids`` (all of them when
    empty): each process by PID and container, with the recorded launch whose process group it is in (a server
    another attempt left running is stopped as that attempt, not freed by PID), and memory held with none listed."""
    lines: list[str] = []
    held_by: dict[str, str] = {}
    others = False
    for gpu in (g for g in host.gpus if not uuids or g.uuid in uuids):
        procs = host.processes_of(gpu)
        for p in procs:
            owner = f"CT {p.vmid}" if p.vmid else "the host"
            launch = launch_of(p, node, launches)
            lines.append(f"GPU {gpu.index}: PID {p.pid} ({owner}) {p.name} {p.used_mib} MiB"
                         + (f" <- {launch.label}" if launch is not None else ""))
            if launch is None:
                others = True
            else:
                held_by[launch.attempt] = launch.label
        if not procs and (gpu.memory_used_mib or 0) >= orphaned_mib:
            lines.append(f"GPU {gpu.index}: {gpu.memory_used_mib} MiB held, no process listed (orphaned)")
            others = True
    return MemoryHolders(tuple(lines), tuple(held_by.items()), others)


def _process_title(status: TargetStatus, count: int) -> str:
    snap = status.snapshot
    if status.process_view is ProcessView.HIDDEN:
        return "processes: not visible inside the container, and the node could not be read"
    if status.process_view is ProcessView.FROM_HOST:
        return f"processes of CT {status.target.vmid} (read on node {status.target.node}): {count or 'none'}"
    if snap is not None and snap.process_listing is ProcessListing.EMPTY:
        return "processes: section empty (PID namespace: not visible here)"
    if snap is not None and snap.process_listing is ProcessListing.ABSENT:
        return "processes: not read"
    return f"compute processes: {count or 'none'}"


def target_view(status: TargetStatus, launches: Mapping[Launch, LaunchRef] | None = None) -> TargetView:
    target = status.target
    title = target.label
    snap = status.snapshot
    # a container whose GPUs could not be read: its CUDA devices check says whether the nodes are there at all
    devices: tuple[str, ...] = (f"CUDA devices: {status.devices[1]}",) if status.devices else ()
    if status.state is TargetState.UNREACHABLE:
        return TargetView(title, "unreachable", f"unreachable: {status.problem}", (), (), "", (), devices)
    if status.state in (TargetState.STOPPED, TargetState.NO_CONTAINER):  # the node said why: its words suffice
        return TargetView(title, status.state.value, status.problem or status.state.value, (), (), "", (), devices)
    if status.state is TargetState.UNREADABLE:
        return TargetView(title, "unreadable", f"output not understood: {status.problem}", (), (), "", (), devices)
    detail: tuple[str, ...] = ()
    if snap is not None and snap.error is not None:
        detail = snap.error.lines
    if status.state is TargetState.SMI_ERROR and not status.rows:
        kind = snap.error.kind.value if snap and snap.error else "error"
        return TargetView(title, "smi-error", f"nvidia-smi error ({kind}): {status.problem}", (), (), "", (),
                          (*detail, *devices))
    versions = []
    if snap is not None and snap.driver_version:
        versions.append(f"driver {snap.driver_version}")
    if snap is not None and snap.cuda_version:
        versions.append(f"CUDA {snap.cuda_version}")
    versions.append(f"{len(status.rows)} GPU" + ("s" if len(status.rows) != 1 else ""))
    flags: list[str] = []
    for row in status.rows:
        flags.extend(f"GPU {row.gpu.index}: {flag}" for flag in row.flags)
        for vmid, mib in sorted(row.other_containers_mib.items()):
            owner = f"CT {vmid}" if vmid else "processes outside any container"
            flags.append(f"GPU {row.gpu.index}: {mib} MiB held by {owner}")
    if target.kind != "local" and any(f.startswith(ORPHANED_FLAG) for r in status.rows for f in r.flags):
        # the memory is the node's to find: a container's own free would list only that container's processes
        flags.append(f"{ORPHANED_FLAG}: `/gpu free {target.node}` finds by PID what keeps a GPU open with no memory "
                     "listed for it (as a killed server's child does) and stops it after a click")
    if status.state is TargetState.SMI_ERROR:
        flags.insert(0, f"nvidia-smi reported: {status.problem}")
    if status.devices and status.devices[0] != "ok":  # GPUs that answer, in a container where CUDA may not
        flags += devices
    procs = process_lines(status.rows, target.node, launches)
    state = "attention" if flags or status.state is TargetState.SMI_ERROR else "ok"
    return TargetView(
        title=title,
        state=state,
        summary=" · ".join(versions),
        gpu_lines=(GPU_HEADER, *(gpu_line(r.gpu) for r in status.rows)),
        flag_lines=tuple(flags),
        process_title=_process_title(status, len(procs)),
        process_lines=(PROCESS_HEADER, *procs) if procs else (),
        detail_lines=detail,
    )


def status_data(statuses: tuple[TargetStatus, ...], launches: Mapping[Launch, LaunchRef] | None = None
                ) -> dict[str, Any]:
    """The status answer as plain data (``gpuops status --json``): each target with the state and flags the
    table shows, its GPUs with their readings (a cell that held no value is null, its text under ``unreadable``),
    and each GPU's processes with the container that owns them and the recorded launch they belong to."""
    targets = []
    for status in statuses:
        view = target_view(status, launches)
        target, snap = status.target, status.snapshot
        targets.append({
            "target": target.label, "kind": target.kind, "node": target.node, "vmid": target.vmid,
            "container": target.name, "state": view.state, "problem": status.problem,
            "driver_version": snap.driver_version if snap else None,
            "cuda_version": snap.cuda_version if snap else None,
            "processes_read": status.process_view.value, "flags": list(view.flag_lines),
            "error_lines": list(view.detail_lines),
            "cuda_devices": {"state": status.devices[0], "detail": status.devices[1]} if status.devices else None,
            "gpus": [{
                "index": r.gpu.index, "name": r.gpu.name, "memory_used_mib": r.gpu.memory_used_mib,
                "memory_total_mib": r.gpu.memory_total_mib, "memory_free_mib": r.gpu.memory_free_mib,
                "utilization_pct": r.gpu.utilization_pct, "temperature_c": r.gpu.temperature_c,
                "power_draw_w": r.gpu.power_draw_w, "power_limit_w": r.gpu.power_limit_w, "uuid": r.gpu.uuid,
                "pci_bus_id": r.gpu.pci_bus_id, "unreadable": dict(r.gpu.raw), "flags": list(r.flags),
                "held_by_other_containers_mib": {str(vmid): mib
                                                 for vmid, mib in sorted(r.other_containers_mib.items())},
                "processes": [{
                    "pid": p.pid, "name": p.name, "used_mib": p.used_mib, "container_vmid": p.vmid,
                    "running_s": None if p.running_s is None else round(p.running_s, 1),
                    "launch": asdict(launch) if (launch := launch_of(p, target.node, launches or {})) else None,
                } for p in r.processes],
            } for r in status.rows],
        })
    return {"targets": targets}
