"""Evidence a finding's label calls for beyond the log itself: who holds the port a launch could
not bind, which transformers the container has against the one that wrote the checkpoint's
config, which of the processes torch named when the GPU ran out still hold memory, and whether the
kernel's OOM killer killed the launch (how much room NCCL had in /dev/shm: bot.core.shm). Pure: the
edges read /proc, the versions, the node's GPUs and its kernel log; these functions read their
answers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.core.diagnosis import ECHO, HOST_OOM_KILL, NOT_A_CAUSE, Finding, TorchOom
from bot.core.flags import LaunchFlags, indices_text, parse_sglang_flags
from bot.core.gpu import GpuProcess, SmiSnapshot
from bot.core.gpu_faults import OomKill, nvidia_nodes_passed, server_kill
from bot.core.report import Launch, LaunchRef, MemoryHolders, launch_of
from bot.core.status import DEFAULT_THRESHOLDS
from bot.errors import UsageError

# how the binders SGLang uses name the port they could not take (formats of torch, asyncio/uvicorn and pyzmq)
_PORT_IN_LINE = (
    re.compile(r"failed to listen on any local network address\. port: (\d{1,5})\b"),  # torch TCPStore (dist init)
    re.compile(r"error while attempting to bind on address \('[^']*', (\d{1,5})\)"),  # the HTTP server (uvicorn)
    re.compile(r"Address already in use \(addr='tcp://[^']*:(\d{1,5})'\)"),  # a ZMQ socket
)


def ports_named(lines: Iterable[str]) -> tuple[int, ...]:
    """The TCP ports a log says could not be bound, in order of first mention."""
    found: list[int] = []
    for line in lines:
        for pattern in _PORT_IN_LINE:
            for match in pattern.finditer(line):
                port = int(match.group(1))
                if 0 < port < 65536 and port not in found:
                    found.append(port)
    return tuple(found)


@dataclass(frozen=True)
class PortHolder:
    port: int
    pid: int
    command: str
    group: int | None = None  # its process group: a gpuops launch's recorded PID leads one


def parse_port_holders(stdout: str) -> tuple[frozenset[int], tuple[PortHolder, ...]] | None:
    """The ports with a listening socket and the processes holding them, from the container's answer
    (``argv.port_holders``); None when the answer is not one."""
    try:
        data = json.loads(stdout)
        listening = frozenset(int(p) for p in data["listening"])
        holders = tuple(PortHolder(int(h["port"]), int(h["pid"]), str(h["cmd"]),
                                   int(h["pgid"]) if h.get("pgid") is not None else None) for h in data["holders"])
    except (ValueError, KeyError, TypeError):
        return None
    return listening, holders


def port_evidence(checked: Iterable[int], launch_port: int | None, named_in_log: bool,
                  listening: frozenset[int], holders: Iterable[PortHolder],
                  launches: Mapping[int, str] | None = None) -> tuple[str, ...]:
    """One line per port: whose it is for the launch, and who holds it now (by PID, with its command; and the
    gpuops attempt whose process group it is in, from ``launches``: recorded PID -> attempt id)."""
    held = list(holders)
    lines = [] if named_in_log else ["the log names no port; checked this launch's --port"]
    for port in checked:
        if port == launch_port:
            kind = "this launch's --port"
        else:
            kind = (f"not this launch's --port {launch_port}: " if launch_port else "") + \
                "a port SGLang opened for its ranks or workers (torch dist-init, NCCL, ZMQ)"
        owners = [h for h in held if h.port == port]
        if owners:
            who = "; ".join(f"PID {h.pid}: {h.command or '(no command line)'}" for h in owners[:3])
            attempt = next((launches[h.group] for h in owners if launches and h.group is not None
                            and h.group in launches), None)
            stop = f" - attempt {attempt}'s process group: `/sglang stop {attempt}`" if attempt else ""
            lines.append(f"port {port} ({kind}) is held by {who}{stop}")
        elif port in listening:
            lines.append(f"port {port} ({kind}) is listened on by a process this container cannot see")
        else:
            lines.append(f"port {port} ({kind}) is free now: whatever held it has exited")
    return tuple(lines)


def transformers_evidence(installed: str | None, written_by: str | None) -> str | None:
    """The installed transformers against the version that wrote the checkpoint's config.json."""
    if not installed and not written_by:
        return None
    have = f"transformers {installed}" if installed else "transformers (version not readable)"
    if not written_by:
        return f"{have} in the container; the checkpoint's config.json does not say which version wrote it"
    older = transformers_older(installed, written_by)
    verdict = (" - older: upgrade to at least that" if older else " - not older, so the model type comes from a "
               "newer or a development release (see the model card)" if older is False else "")
    return f"{have} in the container; the checkpoint's config.json was written by transformers {written_by}{verdict}"


def transformers_older(installed: str | None, written_by: str | None) -> bool | None:
    """True when the installed transformers is an older minor release than the one that wrote the config
    (an unknown model_type then fails at load); None when either version is unreadable."""
    def minor(version: str) -> tuple[int, int] | None:
        match = re.match(r"(\d+)\.(\d+)", version)
        return (int(match.group(1)), int(match.group(2))) if match else None

    have, want = minor(installed or ""), minor(written_by or "")
    if have is None or want is None:
        return None
    return have < want


def oom_holders_evidence(oom: TorchOom, node: str, processes: Iterable[GpuProcess],
                         launches: Mapping[Launch, LaunchRef] | None = None) -> tuple[str, ...]:
    """Each process torch named in its out-of-memory report (by host PID: NVML reports those, in a container
    too) against the node's GPU processes now: one still holding memory was not the launch's, and its memory
    is what the budget did not count. One of a recorded launch (``launches``, as /gpu status names them) is
    stopped as that attempt; `/gpu free` is named for the others."""
    now = {p.pid: p for p in processes if p.pid is not None}
    lines = []
    refs: list[LaunchRef] = []
    others = False
    for pid, size in oom.holders[:6]:
        current = now.get(pid)
        if current is None:
            lines.append(f"PID {pid} held {size} when the launch ran out; it holds no GPU memory now (exited, or "
                         "it was the launch itself)")
            continue
        ref = launch_of(current, node, launches or {})
        owner = f"CT {current.vmid}" if current.vmid else "the host"
        used = f"{current.used_mib} MiB" if current.used_mib is not None else "memory"
        lines.append(f"PID {pid} ({owner}: {current.name or 'no name'}) held {size} when the launch ran out and "
                     f"still holds {used}" + (f" <- {ref.label}" if ref else ""))
        if ref is None:
            others = True
        elif ref not in refs:
            refs.append(ref)
    if refs:
        lines.append(f"memory the launch's budget did not count: {_stops([ref.attempt for ref in refs])}")
    if others:
        lines.append(f"memory the launch's budget did not count: `/gpu free {node}` lists those PIDs and stops only "
                     "the ones you confirm")
    return tuple(lines)


def _stops(attempts: Sequence[str], held: str = "it") -> str:
    """How the recorded launches holding a GPU are stopped: each as the attempt it is (its whole process group,
    and its record), which `/gpu free` leaves to it."""
    return " and ".join(f"`/sglang stop {attempt}`" for attempt in attempts) + \
        (f" stop the launches holding {held}" if len(attempts) > 1 else f" stops the launch holding {held}")


def occupied_next_step(next_step: str, node: str, vmid: int, holders: MemoryHolders | None) -> str:
    """The next step of SGLang's balance refusal, for this container, from who holds the node's GPUs now: the
    recorded launches holding them are stopped as those attempts (`/gpu free` leaves a launch to its stop), and only
    the other holders, or holders not known, are left to `/gpu free`."""
    step = next_step.replace("<container>", f"{node}:{vmid}")
    if holders is None or not holders.launches:
        return step
    stops = _stops([attempt for attempt, _ in holders.launches], "the GPUs")
    if holders.others:
        return f"{stops}; for the other holders: {step}"
    return f"{stops}; then relaunch unchanged"


def occupied_evidence(node: str, vmid: int, snapshot: SmiSnapshot | None,
                      launches: Mapping[Launch, LaunchRef] | None = None) -> tuple[str, ...]:
    """Who holds the node's GPUs now, for SGLang's balance refusal: a recorded launch's server (``launches``, as
    /gpu status names them), stopped as that attempt; other processes `/gpu free` can stop by PID; and memory no
    listed process holds, which it cannot (a killed process's memory not yet returned, or a process nvidia-smi does
    not list)."""
    free_cmds = f"`/gpu free {node}:{vmid}` (this container) or `/gpu free {node}` (every container on the node)"
    if snapshot is None:
        return (f"the node's GPUs could not be read now; {free_cmds} lists what holds them by PID",)
    lines = []
    for gpu in snapshot.gpus:
        used = gpu.memory_used_mib
        if used is None or used < DEFAULT_THRESHOLDS.orphaned_memory_mib:
            continue
        held = snapshot.processes_of(gpu)
        if held:
            owned = [(p, launch_of(p, node, launches or {})) for p in held]
            who = ", ".join(f"PID {p.pid} ({p.owner}) {p.used_mib} MiB" + (f" <- {ref.label}" if ref else "")
                            for p, ref in owned[:3])
            refs = list(dict.fromkeys(ref for _, ref in owned if ref is not None))
            how = [_stops([ref.attempt for ref in refs])] if refs else []
            if any(ref is None for _, ref in owned):
                how.append(f"{free_cmds} stops {'the others' if refs else 'them'} by PID after a confirmation")
            lines.append(f"GPU {gpu.index}: {used} MiB in use, held by {who}: {'; '.join(how)}")
        else:
            lines.append(f"GPU {gpu.index}: {used} MiB in use that no listed process holds (orphaned: a killed "
                         "process's memory not yet returned, kept by a process nvidia-smi does not list, such as a "
                         f"killed server's child that still holds the GPU open): {free_cmds} finds the CUDA processes "
                         "that hold the GPU open and stops them by PID after a confirmation; memory nothing holds "
                         "open only a driver reset or a reboot of the node returns")
    return tuple(lines) or ("no GPU of the node holds memory now: whatever held it has exited; relaunch unchanged",)


def busy_evidence(snapshot: SmiSnapshot | None) -> tuple[str, ...]:
    """Each GPU's compute mode and holders now, for a GPU that refused a CUDA context: an exclusive mode with a
    process on the GPU is the usual cause; Default mode with nobody on it points at the device's state instead."""
    if snapshot is None:
        return ("the node's GPUs could not be read now: check their compute mode with nvidia-smi on the node",)
    lines = []
    for gpu in snapshot.gpus:
        held = snapshot.processes_of(gpu)
        mode = gpu.compute_mode or "not read"
        who = ", ".join(f"PID {p.pid} ({p.owner})" for p in held[:3]) or "no process"
        exclusive = mode.lower().startswith(("exclusive", "prohibited"))
        verdict = (" - one process at a time: the holder keeps the launch out" if exclusive and held else
                   " - no process may use it" if mode.lower().startswith("prohibited") else "")
        lines.append(f"GPU {gpu.index}: compute mode {mode}, held by {who}{verdict}")
    if lines and not any("keeps the launch out" in x or "no process may" in x for x in lines):
        lines.append("no GPU is in an exclusive mode with a holder: a device state then (look for Xid events, "
                     "or reset the GPU on the node once nothing uses it)")
    return tuple(lines)


def driver_evidence(node: str, snapshot: SmiSnapshot | None) -> tuple[str, ...]:
    """For a driver-family finding: the driver the node runs and the newest CUDA it runs, as nvidia-smi reports
    them. A container must load that same driver's user-space libraries, and its build may need no newer CUDA."""
    if snapshot is None or not snapshot.driver_version:
        return (f"{node}'s driver could not be read now: compare `nvidia-smi` on the node and in the container",)
    cuda = f", which runs CUDA up to {snapshot.cuda_version}" if snapshot.cuda_version else ""
    return (f"{node} runs NVIDIA driver {snapshot.driver_version}{cuda}: the container needs that driver's own "
            "user-space libraries (`nvidia-smi` there says \"Driver/library version mismatch\" otherwise), and a "
            "build (torch, Triton, FlashInfer) for no newer a CUDA",)


def ordinal_evidence(node: str, vmid: int | None, snapshot: SmiSnapshot | None,
                     flags: Sequence[str], pct_config: str | None = None) -> tuple[str, ...]:
    """For a rank that asked for a GPU index its process cannot see: the indices the launch's flags use against the
    GPUs the node has, and the GPU devices the container's config (``pct config``, when read) passes in. A container
    sees only the GPUs passed through to it (its /dev/nvidiaN entries), so fewer than the launch needs is the usual
    cause."""
    lines = []
    try:
        parsed: LaunchFlags | None = parse_sglang_flags(flags)
    except UsageError:  # a flag value the parser refuses: say only where to look
        parsed = None
    if parsed is not None:
        lines.append(f"the launch uses {parsed.gpus_needed} GPU(s) (tp x pp x dp), indices "
                     f"{indices_text(parsed.gpu_indices)}: the process must see at least {parsed.gpus_spanned}")
    if snapshot is not None:
        lines.append(f"{node} has {len(snapshot.gpus)} GPU(s) (nvidia-smi on the node)")
    where = f"`pct config {vmid}` on {node}" if vmid is not None else "the container's configuration"
    gpus = [path for path in nvidia_nodes_passed(pct_config or "") if re.fullmatch(r"/dev/nvidia\d+", path)]
    passed = f"passes {len(gpus)} GPU device(s) into the container ({', '.join(gpus)})" if gpus else \
        "lists the /dev/nvidia* devices the container gets"
    lines.append(f"{where} {passed}; `nvidia-smi -L` inside it shows the GPUs it sees (CUDA_VISIBLE_DEVICES narrows "
                 "them further)")
    return tuple(lines)


# what the other ranks see when one of them vanishes: a transport or a collective failing on the lost peer
PEER_LOSS = frozenset({"nccl_error", "distributed_comm_error", "dist_init_timeout"})


def killed_by_the_oom_killer(finding: Finding, kills: Iterable[OomKill], vmid: int | None) -> Finding:
    """A launch whose log names no cause of its own (a child's death echoed, a log that just stops, a traceback
    cut short), or only the lost peer the survivors saw (NCCL, gloo, a collective that timed out), while the
    kernel's OOM killer killed a process in its container: the kill is the first cause. Read from the node's kernel
    log since the launch started; the log's own reading is kept as a note. ``vmid`` None: a kernel log handed over
    with a log file, whose container is not known (a bare host, docker): a killed Python or SGLang process is it."""
    kill = server_kill(kills, vmid)
    if kill is None or (finding.label not in (ECHO, *NOT_A_CAUSE, *PEER_LOSS) and finding.confidence != "low"):
        return finding
    where = vmid if vmid is not None else kill.vmid
    inside = f" in CT {where}" if where is not None else ""
    if kill.node_ran_out:
        next_step = ("free RAM on the node (other guests and containers, or give it more), then relaunch unchanged; "
                     "loading passes the checkpoint through host memory")
    elif where is not None and kill.container_limit == where:
        next_step = (f"raise CT {where}'s memory limit on the node (`pct set {where} -memory <MiB>`: loading passes "
                     "the checkpoint through host memory), then relaunch unchanged")
    else:
        next_step = ("raise the limit that was reached (the container's `pct set -memory`, or one set inside it), "
                     "then relaunch unchanged")
    return Finding(
        HOST_OOM_KILL, finding.phase if finding.phase != "unknown" else "startup",
        "high" if kill.is_server and vmid is not None else "medium",
        f"the kernel's OOM killer killed PID {kill.pid} ({kill.command}){inside} while this launch ran: "
        f"{kill.reached}; a process killed that way leaves no error of its own in the log",
        next_step, finding.evidence, tuple(x for x in (finding.label, *finding.also_seen) if x not in NOT_A_CAUSE),
        (*finding.notes, f"the log alone: {finding.label}: {finding.explanation}"))
