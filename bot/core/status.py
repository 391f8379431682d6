"""What a status answer says about each target: pure judgement over parsed readings.

The rules here decide what must never look idle: an unreachable node, an error banner,
unreadable values, and memory held with no process listed ("orphaned memory").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from bot.core.gpu import Gpu, GpuProcess, ProcessListing, SmiSnapshot, process_on_gpu
from bot.core.inventory import Target

_LXC_RE = re.compile(r"/lxc(?:\.payload)?[./](\d+)(?:/|$)")


class TargetState(StrEnum):
    OK = "ok"
    SMI_ERROR = "smi-error"  # nvidia-smi answered with an error banner
    UNREACHABLE = "unreachable"  # SSH failed, timed out, host key refused
    UNREADABLE = "unreadable"  # output arrived but could not be parsed
    STOPPED = "stopped"  # the node answered: the container is not running (pct: "CT <vmid> not running")
    NO_CONTAINER = "no-container"  # the node answered: it has no such container


class ProcessView(StrEnum):
    HOST = "host"  # read on the Proxmox node: every PID is visible
    FROM_HOST = "from-host"  # container target; its processes were read on the node
    HIDDEN = "hidden"  # container target; nvidia-smi inside lists none and the node could not be read


@dataclass(frozen=True)
class Thresholds:
    orphaned_memory_mib: int = 256  # held memory with no process above this is flagged
    hot_c: int = 85
    power_near_cap_ratio: float = 0.98


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class GpuRow:
    gpu: Gpu
    processes: tuple[GpuProcess, ...]
    flags: tuple[str, ...]
    other_containers_mib: dict[int, int]  # container target: memory on this GPU held by other CTs


@dataclass(frozen=True)
class TargetStatus:
    target: Target
    state: TargetState
    rows: tuple[GpuRow, ...] = ()
    snapshot: SmiSnapshot | None = None
    problem: str | None = None
    process_view: ProcessView = ProcessView.HOST
    elapsed_s: float | None = None
    # a container target: its CUDA devices check ("ok" | "warn" | "fail", detail), None when not read
    devices: tuple[str, str] | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.rows)


def vmids_from_cgroups(text: str) -> dict[int, int]:
    """``grep -H '' /proc/<pid>/cgroup`` output -> {pid: vmid} for PIDs inside LXC containers."""
    owners: dict[int, int] = {}
    for line in text.splitlines():
        path, _, content = line.partition(":")
        pid_match = re.search(r"/(\d+)/cgroup$", path)
        lxc = _LXC_RE.search(content)
        if pid_match and lxc:
            owners[int(pid_match.group(1))] = int(lxc.group(1))
    return owners


def groups_from_status(text: str) -> dict[int, int]:
    """``<proc>/<pid>/status:NSpgid:\t<pgid>...`` lines -> {pid: its process group in its innermost PID
    namespace} (the kernel prints one ID per namespace level, the process's own last)."""
    groups: dict[int, int] = {}
    for line in text.splitlines():
        path, _, content = line.partition(":")
        pid_match = re.search(r"/(\d+)/status$", path)
        if pid_match and content.startswith("NSpgid:"):
            ids = content.removeprefix("NSpgid:").split()
            if ids and ids[-1].isdigit():
                groups[int(pid_match.group(1))] = int(ids[-1])
    return groups


def _stat_lines(text: str) -> Iterator[tuple[int, str]]:
    """``<proc>/<pid>/stat:<pid> (<comm>) ...`` lines -> (pid, the stat line), each line that is its own PID's."""
    for line in text.splitlines():
        path, _, content = line.partition(":")
        pid_match = re.search(r"/(\d+)/stat$", path)
        if pid_match and content.startswith(f"{pid_match.group(1)} ("):
            yield int(pid_match.group(1)), content


def start_times_from_stat(text: str) -> dict[int, int]:
    """``<proc>/<pid>/stat:<pid> (<comm>) <state> ...`` lines -> {pid: its start time in clock ticks after boot}.
    The command name may hold spaces and parentheses, so fields are counted after its last ``) ``: the state is
    field 3 of the kernel's numbering and the start time field 22."""
    started: dict[int, int] = {}
    for pid, content in _stat_lines(text):
        fields = content.rpartition(") ")[2].split()
        if len(fields) > 19 and fields[19].isdigit():
            started[pid] = int(fields[19])
    return started


def names_from_stat(text: str) -> dict[int, str]:
    """``<proc>/<pid>/stat:<pid> (<comm>) ...`` lines -> {pid: its command name} (the kernel's, cut at 15
    characters; it may hold spaces and parentheses itself)."""
    return {pid: content[len(str(pid)) + 2:content.rindex(") ")] for pid, content in _stat_lines(text)
            if ") " in content}


_GPU_DEVICE_RE = re.compile(r"/dev/nvidia\d+")
UVM_DEVICE = "/dev/nvidia-uvm"  # every CUDA process opens it (CUDA cannot initialise without it); NVML does not


def gpu_device_holders(text: str, proc_root: str = "/proc") -> dict[int, tuple[str, ...]]:
    """:func:`bot.core.argv.nvidia_device_holders` output -> {pid: the GPU device nodes it holds open, as a file
    descriptor or a mapping (a CUDA process maps them too, and a mapping keeps the device held)}, for each CUDA
    process: one that holds a GPU's own node (``/dev/nvidia0``) and ``/dev/nvidia-uvm``. A monitor reading the GPUs
    through NVML (nvtop, an exporter) holds the GPU's node but not nvidia-uvm, and no GPU memory: not one."""
    root = re.escape(proc_root.rstrip("/"))
    held: dict[int, set[str]] = {}
    for line in text.splitlines():
        found = re.fullmatch(rf"{root}/(\d+)/(?:fd|map_files) (\S+)", line.strip())
        if found and (_GPU_DEVICE_RE.fullmatch(found.group(2)) or found.group(2) == UVM_DEVICE):
            held.setdefault(int(found.group(1)), set()).add(found.group(2))
    def gpu_nodes(devices: set[str]) -> tuple[str, ...]:
        return tuple(sorted(devices - {UVM_DEVICE}, key=lambda d: int(d.removeprefix("/dev/nvidia"))))

    return {pid: gpu_nodes(devices) for pid, devices in sorted(held.items())
            if UVM_DEVICE in devices and gpu_nodes(devices)}


# NVIDIA's own services hold every GPU's device node open by design (the persistence daemon, DCGM's host engine, the
# power daemon, MPS, nvidia-smi itself): never a leftover to stop. Command names as the kernel keeps them (15 chars).
NVIDIA_SERVICES = ("nvidia-persiste", "nvidia-smi", "nv-hostengine", "nvidia-powerd", "nvidia-cuda-mps", "dcgmi",
                   "dcgm-exporter")


# /proc counts times in USER_HZ ticks, 100 a second on every architecture Linux runs on (sysconf(_SC_CLK_TCK))
CLOCK_TICKS_PER_S = 100


def uptime_from(text: str) -> float | None:
    """The ``<proc>/uptime:<seconds since boot> <idle seconds>`` line -> seconds since boot."""
    for line in text.splitlines():
        path, _, content = line.partition(":")
        if path.endswith("/uptime") and (match := re.match(r"(\d+(?:\.\d+)?) ", content)):
            return float(match.group(1))
    return None


def attribute(processes: tuple[GpuProcess, ...], owners: dict[int, int], groups: dict[int, int] | None = None,
              started: dict[int, int] | None = None, uptime_s: float | None = None) -> tuple[GpuProcess, ...]:
    groups, started = groups or {}, started or {}

    def running_s(pid: int) -> float | None:
        ticks = started.get(pid)
        if ticks is None or uptime_s is None:
            return None
        return max(0.0, uptime_s - ticks / CLOCK_TICKS_PER_S)

    return tuple(replace(p, vmid=owners.get(p.pid), group=groups.get(p.pid), started=started.get(p.pid),
                         running_s=running_s(p.pid)) if p.pid is not None else p for p in processes)


def attribute_from_proc(processes: tuple[GpuProcess, ...], entries: str) -> tuple[GpuProcess, ...]:
    """:func:`attribute` from what :func:`bot.core.argv.read_proc_entries` printed (or the same lines read locally):
    each process's container, group, start time and how long it has run."""
    return attribute(processes, vmids_from_cgroups(entries), groups_from_status(entries),
                     start_times_from_stat(entries), uptime_from(entries))


# N/A here is normal: passive cooling, no power cap on laptops and unified-memory parts
_ROUTINELY_NA = frozenset({"fan", "power_limit", "power_draw"})


def failed_reads(gpu: Gpu) -> list[str]:
    """Unreadable values worth a flag: ERR! anywhere; N/A where a healthy GPU reports a value."""
    failed = []
    for key in gpu.unreadable_fields:
        raw = gpu.raw[key]
        if raw.upper().startswith("ERR") or raw.lower() in ("unknown error", "gpu is lost"):
            failed.append(key)
        elif key in _ROUTINELY_NA:
            continue
        elif key == "utilization" and (gpu.mig_mode or "").lower() == "enabled":
            continue  # MIG mode reports no whole-GPU utilization
        else:
            failed.append(key)
    return failed


ORPHANED_FLAG = "orphaned memory"  # how a GPU flag starts when the GPU holds memory and lists no process


def gpu_flags(gpu: Gpu, processes: tuple[GpuProcess, ...], listing_visible: bool, limits: Thresholds) -> list[str]:
    flags: list[str] = []
    failed = failed_reads(gpu)
    if failed:
        flags.append("unreadable: " + ", ".join(f"{k}={gpu.raw[k]}" for k in failed))
    used = gpu.memory_used_mib
    if listing_visible and used is not None and used >= limits.orphaned_memory_mib:
        accounted = sum(p.used_mib or 0 for p in processes)
        if not processes:
            flags.append(f"{ORPHANED_FLAG}: {used} MiB held, no process listed")
        elif all(p.used_mib is not None for p in processes) and used - accounted >= max(
            limits.orphaned_memory_mib, used // 4
        ):
            flags.append(f"unaccounted memory: {used - accounted} MiB beyond listed processes")
    if gpu.temperature_c is not None and gpu.temperature_c >= limits.hot_c:
        flags.append(f"hot: {gpu.temperature_c}°C")
    if gpu.power_draw_w and gpu.power_limit_w and gpu.power_draw_w >= gpu.power_limit_w * limits.power_near_cap_ratio:
        flags.append("power at cap")
    return flags


def assess_node(target: Target, snapshot: SmiSnapshot, limits: Thresholds = DEFAULT_THRESHOLDS) -> TargetStatus:
    """A Proxmox node read on the host: NVML sees every PID, so an empty list means none."""
    if snapshot.error is not None and not snapshot.gpus:
        return TargetStatus(target, TargetState.SMI_ERROR, snapshot=snapshot, problem=snapshot.error.meaning)
    visible = snapshot.process_listing in (ProcessListing.LISTED, ProcessListing.NONE_FOUND)
    rows = []
    for gpu in snapshot.gpus:
        procs = snapshot.processes_of(gpu)
        rows.append(GpuRow(gpu, procs, tuple(gpu_flags(gpu, procs, visible, limits)), {}))
    state = TargetState.SMI_ERROR if snapshot.error else TargetState.OK
    problem = snapshot.error.meaning if snapshot.error else None
    return TargetStatus(target, state, tuple(rows), snapshot, problem, ProcessView.HOST)


def assess_container(
    target: Target,
    inside: SmiSnapshot,
    host: SmiSnapshot | None,
    limits: Thresholds = DEFAULT_THRESHOLDS,
) -> TargetStatus:
    """A container read from inside, with its processes taken from the node's view when it
    could be read (inside a PID namespace nvidia-smi usually lists nothing)."""
    if inside.error is not None and not inside.gpus:
        return TargetStatus(target, TargetState.SMI_ERROR, snapshot=inside, problem=inside.error.meaning)
    rows = []
    for gpu in inside.gpus:
        host_gpu = _match_host_gpu(gpu, host) if host else None
        if host is not None and host_gpu is not None:
            on_gpu = host.processes_of(host_gpu)
            mine = tuple(p for p in on_gpu if p.vmid == target.vmid)
            others: dict[int, int] = {}
            for p in on_gpu:
                if p.vmid != target.vmid:
                    key = p.vmid if p.vmid is not None else 0
                    others[key] = others.get(key, 0) + (p.used_mib or 0)
            flags = gpu_flags(gpu, on_gpu, True, limits)
            rows.append(GpuRow(gpu, mine, tuple(flags), others))
        else:
            own = inside.processes_of(gpu)
            flags = gpu_flags(gpu, own, False, limits)
            used = gpu.memory_used_mib
            if not own and used is not None and used >= limits.orphaned_memory_mib:
                flags.append(f"{used} MiB held; the holder is not visible from inside the container")
            rows.append(GpuRow(gpu, own, tuple(flags), {}))
    view = ProcessView.FROM_HOST if host is not None else ProcessView.HIDDEN
    if host is None and inside.process_listing is ProcessListing.LISTED:
        view = ProcessView.HOST
    state = TargetState.SMI_ERROR if inside.error else TargetState.OK
    return TargetStatus(target, state, tuple(rows), inside, inside.error.meaning if inside.error else None, view)


def _match_host_gpu(gpu: Gpu, host: SmiSnapshot) -> Gpu | None:
    for candidate in host.gpus:
        if gpu.uuid and candidate.uuid:
            if gpu.uuid == candidate.uuid:
                return candidate
        elif gpu.pci_bus_id and candidate.pci_bus_id and gpu.pci_bus_id == candidate.pci_bus_id:
            return candidate
    return None


def pct_refusal(node: str, vmid: int, pct_said: str) -> tuple[TargetState, str] | None:
    """What ``pct exec`` dying with Proxmox's own words means (``CT 129 not running``, ``Configuration file
    'nodes/pve5/lxc/999.conf' does not exist``): the container's state and the words for it; None for anything else,
    or another container's words."""
    said = pct_said.strip()
    if f"CT {vmid} not running" in said:
        return TargetState.STOPPED, (f"container {vmid} on {node} is not running, so nothing in it holds a GPU "
                                     f"(`pct start {vmid}` on {node} starts it; pct: {said})")
    if re.search(rf"Configuration file '\S*/lxc/{vmid}\.conf' does not exist", said):
        return TargetState.NO_CONTAINER, f"{node} has no container {vmid} (pct: {said}); `pct list` on {node} lists " \
                                         "its containers"
    return None


def container_not_read(target: Target, pct_said: str) -> TargetStatus:
    """A container whose GPUs could not be read because ``pct exec`` refused: stopped or missing in Proxmox's words
    (:func:`pct_refusal`), each a state of its own since the node answered; anything else is passed on as said."""
    assert target.vmid is not None
    refused = pct_refusal(target.node, target.vmid, pct_said)
    if refused is not None:
        return TargetStatus(target, refused[0], problem=refused[1])
    return unreachable(target, f"container {target.vmid}: {pct_said.strip() or 'pct exec failed'}")


def unreachable(target: Target, reason: str, elapsed_s: float | None = None) -> TargetStatus:
    return TargetStatus(target, TargetState.UNREACHABLE, problem=reason, elapsed_s=elapsed_s)


def unreadable(target: Target, reason: str) -> TargetStatus:
    return TargetStatus(target, TargetState.UNREADABLE, problem=reason)


def is_clean(statuses: Sequence[TargetStatus]) -> bool:
    """Every target read, and no GPU with a process, held memory or any other flag."""
    return bool(statuses) and all(s.state is TargetState.OK and all(not r.processes and not r.flags for r in s.rows)
                                  for s in statuses)


def memory_evidence(statuses: Sequence[TargetStatus]) -> str:
    """The readings a hypothesis is decided on, short enough for a thread summary:
    "pve5: GPU 0 1/49140 MiB, GPU 1 1/49140 MiB, no compute process"."""
    parts = []
    for s in statuses:
        if s.state is not TargetState.OK:
            parts.append(f"{s.target.label}: not read ({s.state.value})")
            continue
        gpus = ", ".join(f"GPU {r.gpu.index} {'?' if r.gpu.memory_used_mib is None else r.gpu.memory_used_mib}"
                         f"/{'?' if r.gpu.memory_total_mib is None else r.gpu.memory_total_mib} MiB" for r in s.rows)
        count = sum(len(r.processes) for r in s.rows)
        held = f"{count} compute process{'es' if count != 1 else ''}" if count else "no compute process"
        parts.append(f"{s.target.label}: {gpus or 'no GPU'}, {held}")
    return "; ".join(parts)


__all__ = [
    "GpuRow", "ProcessView", "TargetState", "TargetStatus", "Thresholds", "assess_container", "assess_node",
    "NVIDIA_SERVICES", "ORPHANED_FLAG", "attribute", "attribute_from_proc", "container_not_read",
    "gpu_device_holders", "groups_from_status", "is_clean", "memory_evidence",
    "names_from_stat", "pct_refusal", "process_on_gpu", "unreachable", "unreadable", "vmids_from_cgroups",
]
