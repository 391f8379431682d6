"""GPU hardware faults a node exposes: ECC counters, retired pages, remapped rows, and Xid events; and
the kernel OOM killer's kills in the same kernel log (a container's memory limit, or the node's RAM).

Pure: the text of ``nvidia-smi --query-gpu=<MEMORY_ERROR_FIELDS> --format=csv,nounits`` and of
the kernel log come in, typed values and plain-language findings go out. A GPU without ECC
(GeForce, ECC disabled) prints ``[N/A]`` in those cells: that reads as "not exposed", never as
zero errors. Xid meanings and urgency follow NVIDIA's Xid catalog and its page-retirement and
row-remapping guides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.core.smi import field, integer, is_marker, read_csv

_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')


def invalid_query_field(output: str) -> str | None:
    """The field an older nvidia-smi refused (``Field "x" is not a valid field to query.``)."""
    match = _INVALID_FIELD_RE.search(output)
    return match.group(1) if match else None


@dataclass(frozen=True)
class GpuMemoryErrors:
    """One GPU's memory-error counters; ``None`` where the GPU does not expose the counter."""

    index: int
    uuid: str | None
    pci_bus_id: str | None
    ecc_mode: str | None  # Enabled | Disabled | None (not supported)
    corrected_volatile: int | None  # since the last driver load
    uncorrected_volatile: int | None
    uncorrected_aggregate: int | None  # over the GPU's lifetime
    retired_single_bit: int | None
    retired_double_bit: int | None
    retired_pending: bool | None  # a retired page waits for a driver reload / GPU reset
    remapped_correctable: int | None
    remapped_uncorrectable: int | None
    remapped_pending: bool | None  # a remapped row waits for a GPU reset
    remapped_failure: bool | None  # remapping failed: the GPU needs service
    ecc_mode_pending: str | None = None  # the mode after the next reboot

    def counts(self) -> dict[str, int]:
        """The counters that only ever grow, for "since the last report" comparisons."""
        keys = ("uncorrected_aggregate", "retired_single_bit", "retired_double_bit",
                "remapped_correctable", "remapped_uncorrectable")
        return {k: v for k in keys if isinstance(v := getattr(self, k), int)}


def _flag(cell: str | None) -> bool | None:
    if cell is None or is_marker(cell):
        return None
    text = cell.strip().lower()
    if text in ("yes", "no"):
        return text == "yes"
    return None


def _text(cell: str | None) -> str | None:
    return None if cell is None or is_marker(cell) or not cell.strip() else cell.strip()


def _count(cell: str | None) -> int | None:
    return None if cell is None or is_marker(cell) else integer(cell)


# GpuMemoryErrors attribute <- query field, read as text, a count or a Yes/No flag. Identity first;
# older drivers lack the remapped_rows fields (the query drops what the driver refuses)
_COLUMNS: tuple[tuple[str, str, Callable[[str | None], Any]], ...] = (
    ("uuid", "uuid", _text),
    ("pci_bus_id", "pci.bus_id", _text),
    ("ecc_mode", "ecc.mode.current", _text),
    ("ecc_mode_pending", "ecc.mode.pending", _text),
    ("corrected_volatile", "ecc.errors.corrected.volatile.total", _count),
    ("uncorrected_volatile", "ecc.errors.uncorrected.volatile.total", _count),
    ("uncorrected_aggregate", "ecc.errors.uncorrected.aggregate.total", _count),
    ("retired_single_bit", "retired_pages.single_bit_ecc.count", _count),
    ("retired_double_bit", "retired_pages.double_bit.count", _count),
    ("retired_pending", "retired_pages.pending", _flag),
    ("remapped_correctable", "remapped_rows.correctable", _count),
    ("remapped_uncorrectable", "remapped_rows.uncorrectable", _count),
    ("remapped_pending", "remapped_rows.pending", _flag),
    ("remapped_failure", "remapped_rows.failure", _flag),
)
MEMORY_ERROR_FIELDS: tuple[str, ...] = ("index", *(name for _, name, _ in _COLUMNS))


def memory_errors_from_csv(text: str) -> list[GpuMemoryErrors]:
    """Rows of a ``--query-gpu`` CSV printed *with* its header (so dropped fields are fine)."""
    out = []
    for position, row in enumerate(read_csv(text).rows):
        index = integer(field(row, "index"))
        values = {attr: read(field(row, name)) for attr, name, read in _COLUMNS}
        out.append(GpuMemoryErrors(index=position if index is None else index, **values))
    return out


def memory_error_findings(where: str, gpus: list[GpuMemoryErrors],
                          previous: dict[str, dict[str, int]] | None = None) -> list[str]:
    """What an on-call engineer must act on, per GPU; ``previous`` maps GPU uuid/index to the
    counters of the last report, so growth is named even when the absolute count looks small."""
    findings = []
    for g in gpus:
        name = f"{where} GPU {g.index}"
        if g.remapped_failure:
            findings.append(f"{name}: row remapping FAILED — the GPU needs service (drain it and open an RMA)")
        if g.remapped_pending:
            findings.append(f"{name}: a remapped row is pending — reset the GPU (stop its processes first) "
                            "to activate it")
        if g.retired_pending:
            findings.append(f"{name}: a retired page is pending — reload the driver or reset the GPU to retire it")
        if g.ecc_mode and g.ecc_mode_pending and g.ecc_mode_pending != g.ecc_mode:
            findings.append(f"{name}: ECC turns {'on' if g.ecc_mode_pending == 'Enabled' else 'off'} at the next "
                            f"reboot — usable memory changes with it (budgets made now are for the current mode)")
        if g.uncorrected_volatile:
            findings.append(f"{name}: {g.uncorrected_volatile} uncorrectable ECC error(s) since the driver loaded")
        if g.ecc_mode == "Disabled":
            continue
        before = (previous or {}).get(g.uuid or str(g.index))
        if before:
            for key, now in g.counts().items():
                if key in before and now > before[key]:
                    findings.append(f"{name}: {key.replace('_', ' ')} grew {before[key]} -> {now}")
    return findings


def ecc_evidence(where: str, gpus: list[GpuMemoryErrors]) -> str:
    """The node's ECC counters beside a finding of an uncorrectable ECC error: what to act on per GPU, else what the
    counters show (a GPU without counters, or with ECC off, is said so: it cannot vouch for itself)."""
    problems = memory_error_findings(where, gpus)
    if problems:
        return "ECC counters now: " + "; ".join(problems)
    if not gpus:
        return f"ECC counters on {where}: no GPU listed"
    on = [g.index for g in gpus if g.ecc_mode == "Enabled"]
    off = [g.index for g in gpus if g.ecc_mode == "Disabled"]
    unread = [g.index for g in gpus if g.ecc_mode not in ("Enabled", "Disabled")]
    parts = [f"GPU {', '.join(map(str, on))}: ECC on, no uncorrectable error since the driver loaded"] if on else []
    parts += [f"GPU {', '.join(map(str, off))}: ECC off (no counters kept)"] if off else []
    parts += [f"GPU {', '.join(map(str, unread))}: no ECC counters exposed"] if unread else []
    return f"ECC counters on {where} now: " + "; ".join(parts)


# ------------------------------------------------------------------------------------ Xid

# code -> (meaning, what to do). Application-caused codes say so: they are not hardware faults.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception", "usually the application (bad kernel or memory access); restart it"),
    31: ("GPU memory page fault (MMU fault)", "usually the application; restart it, check its CUDA code"),
    43: ("GPU stopped processing", "usually the application; restart it"),
    45: ("preemptive cleanup after earlier errors", "look at the Xid before it"),
    48: ("double-bit (uncorrectable) ECC error", "drain the GPU; reset it, and replace it if DBEs repeat"),
    61: ("internal micro-controller breakpoint", "reset the GPU; contact support if it repeats"),
    62: ("internal micro-controller halt", "reset the GPU; contact support if it repeats"),
    63: ("page retirement / row remapping recorded", "reset the GPU to activate the remap"),
    64: ("page retirement / row remapping FAILED", "the GPU needs service"),
    74: ("NVLink error", "reset the GPU; check the NVLink bridge/cabling if it repeats"),
    79: ("GPU has fallen off the bus", "the GPU is gone until a reboot; check power, riser and seating"),
    92: ("high single-bit ECC error rate", "watch it; service the GPU if it persists"),
    94: ("contained ECC error", "restart the affected application; reset the GPU when convenient"),
    95: ("uncontained ECC error", "reset the GPU; every process on it is affected"),
    109: ("context switch timeout", "usually the application; restart it"),
    119: ("GSP RPC timeout", "reset the GPU or reboot; update the driver if it repeats"),
    120: ("GSP error", "reset the GPU or reboot; update the driver if it repeats"),
    154: ("GPU recovery action changed", "do the recovery action the driver printed (reset or reboot)"),
}
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 109})

_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\):\s*"
                     r"(?P<code>\d+)(?:,\s*(?P<detail>.*))?")
_ISO_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[.,]\d+)?([+-]\d{2}:?\d{2}|Z)?")


@dataclass(frozen=True)
class XidEvent:
    at: float | None  # epoch seconds, when the line carries an ISO time (journalctl short-iso, dmesg iso)
    pci_bus_id: str  # as the driver prints it: 0000:01:00
    code: int
    detail: str

    @property
    def meaning(self) -> str:
        return XID_MEANINGS.get(self.code, (f"Xid {self.code}", ""))[0]

    @property
    def action(self) -> str:
        return XID_MEANINGS.get(self.code, ("", "look the code up in NVIDIA's Xid catalog"))[1]


def _iso_time(line: str) -> float | None:
    match = _ISO_RE.match(line.strip())
    if not match:
        return None
    zone = match.group(2) or "+00:00"
    if zone == "Z":
        zone = "+00:00"
    elif ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    try:
        return datetime.fromisoformat(match.group(1) + zone).timestamp()
    except ValueError:
        return None


def xid_events(kernel_log: str, since: float | None = None) -> list[XidEvent]:
    """Xid lines of a kernel log, oldest first; lines timed before ``since`` are dropped
    (a line without a readable time is kept: the query itself was already bounded)."""
    events = []
    for line in kernel_log.splitlines():
        match = _XID_RE.search(line)
        if not match:
            continue
        at = _iso_time(line)
        if since is not None and at is not None and at < since:
            continue
        detail = (match.group("detail") or "").strip()
        detail = detail if len(detail) <= 140 else detail[:139].rstrip() + "…"
        events.append(XidEvent(at, match.group("pci").lower(), int(match.group("code")), detail))
    return events


def _bus(pci: str | None) -> str | None:
    """``00000000:01:00.0`` (nvidia-smi) and ``0000:01:00`` (the driver's Xid line) -> ``01:00``."""
    if not pci:
        return None
    parts = pci.lower().split(":")
    return ":".join(parts[-2:]).split(".")[0] if len(parts) >= 2 else None


def xid_findings(where: str, events: list[XidEvent], gpus_by_bus: dict[str, int] | None = None) -> list[str]:
    """One line per (GPU, code): how often, the meaning, what to do, and the last detail."""
    grouped: dict[tuple[str, int], list[XidEvent]] = {}
    for event in events:
        grouped.setdefault((event.pci_bus_id, event.code), []).append(event)
    findings = []
    for (pci, code), same in sorted(grouped.items(), key=lambda kv: (kv[0][1] in APPLICATION_XIDS, kv[0])):
        index = (gpus_by_bus or {}).get(_bus(pci) or "")
        gpu = f"GPU {index}" if index is not None else f"GPU at {pci}"
        times = f"{len(same)}x" if len(same) > 1 else "once"
        who = " (application-caused)" if code in APPLICATION_XIDS else ""
        detail = f" — last: {same[-1].detail}" if same[-1].detail else ""
        findings.append(f"{where} {gpu}: Xid {code} {times}, {same[-1].meaning}{who}: {same[-1].action}{detail}")
    return findings


def gpus_by_bus(gpus: Iterable[tuple[int, str | None]]) -> dict[str, int]:
    """(index, PCI bus id) pairs -> bus -> GPU index, to name the GPU an Xid line points at."""
    return {bus: index for index, pci in gpus if (bus := _bus(pci))}


# The kernel's OOM killer, as mm/oom_kill.c prints it: a summary line naming the cgroups and the victim, then the kill
# ("Memory cgroup out of memory: Killed process ..." when a cgroup's limit was reached, "Out of memory: ..." when the
# node ran out). A Proxmox container is the cgroup /lxc/<vmid>.
_OOM_SUMMARY_RE = re.compile(r"oom-kill:constraint=(?P<constraint>\w+)")
_OOM_FIELD_RE = {key: re.compile(rf"[:,]{key}=(?P<value>[^,]*)") for key in ("oom_memcg", "task_memcg", "pid")}
_OOM_KILLED_RE = re.compile(r"(?:(?P<scope>Memory cgroup out of memory|Out of memory): )?Killed process (?P<pid>\d+) "
                            r"\((?P<command>[^)]*)\)(?:.*?anon-rss:(?P<anon>\d+)kB)?")
_LXC_RE = re.compile(r"^/lxc/(?P<vmid>\d+)(?:/|$)")
# the container's own cgroup, where `pct set -memory` puts its limit
_LXC_LIMIT_RE = re.compile(r"^/lxc/(?P<vmid>\d+)(?:/ns)?/?$")


@dataclass(frozen=True)
class OomKill:
    at: float | None
    pid: int  # on the host
    command: str
    anon_rss_kib: int | None
    limit_cgroup: str | None  # the cgroup whose memory limit was reached; None when the node itself ran out
    task_cgroup: str | None  # the victim's cgroup
    node_ran_out: bool | None  # True: the node's RAM; False: a cgroup's limit; None: the kernel did not say

    @property
    def container_limit(self) -> int | None:
        """The Proxmox container whose own memory limit was reached (its cgroup /lxc/<vmid>), if that was it."""
        match = _LXC_LIMIT_RE.match(self.limit_cgroup or "")
        return int(match.group("vmid")) if match else None

    @property
    def reached(self) -> str:
        """Which limit the kill answered: the node's RAM, the container's own limit, or another cgroup's."""
        if self.node_ran_out:
            return "the node ran out of RAM"
        if self.container_limit is not None:
            return f"CT {self.container_limit} reached its memory limit"
        return f"the memory cgroup {self.limit_cgroup} reached its limit" if self.limit_cgroup else "memory ran out"

    @property
    def is_server(self) -> bool:
        """The victim was a Python or SGLang process (an SGLang server's scheduler, or its launcher)."""
        return self.command.startswith(("python", "sglang"))

    @property
    def vmid(self) -> int | None:
        """The Proxmox container the victim ran in (its cgroup, else the limit's)."""
        for cgroup in (self.task_cgroup, self.limit_cgroup):
            if cgroup and (match := _LXC_RE.match(cgroup)):
                return int(match.group("vmid"))
        return None


def oom_kills(kernel_log: str, since: float | None = None) -> list[OomKill]:
    """The OOM killer's kills in a kernel log, oldest first (timed before ``since``: dropped)."""
    summaries: dict[int, tuple[str, str | None, str | None]] = {}
    kills = []
    for line in kernel_log.splitlines():
        if (summary := _OOM_SUMMARY_RE.search(line)) is not None:
            fields = {key: (m.group("value") if (m := pattern.search(line)) else None)
                      for key, pattern in _OOM_FIELD_RE.items()}
            if fields["pid"] and fields["pid"].isdigit():
                summaries[int(fields["pid"])] = (summary.group("constraint"), fields["oom_memcg"],
                                                 fields["task_memcg"])
            continue
        if (killed := _OOM_KILLED_RE.search(line)) is None:
            continue
        pid = int(killed.group("pid"))
        constraint, limit, task = summaries.pop(pid, (None, None, None))
        at = _iso_time(line)
        if since is not None and at is not None and at < since:
            continue
        scope = killed.group("scope")
        node_ran_out = (constraint == "CONSTRAINT_NONE") if constraint else \
            (scope == "Out of memory") if scope else None
        kills.append(OomKill(at, pid, killed.group("command"),
                             int(killed.group("anon")) if killed.group("anon") else None,
                             None if node_ran_out else limit, task, node_ran_out))
    return kills


def server_kill(kills: Iterable[OomKill], vmid: int | None) -> OomKill | None:
    """The kill that ended a launch: in CT ``vmid``, its Python/SGLang process first, else any process there;
    ``vmid`` None (a kernel log off an unknown host): a Python/SGLang process anywhere."""
    ours = [k for k in kills if vmid is None or k.vmid == vmid]
    return next((k for k in ours if k.is_server), None if vmid is None else next(iter(ours), None))


def silent_death_note(kill: OomKill, last_word: str | None) -> str:
    """A launch's failure, when the log says nothing of its own death but the kernel killed its process."""
    said = f"; the log's last word: {last_word}" if last_word else "; the log says nothing of it"
    return f"killed by the kernel's OOM killer: {kill.reached} (PID {kill.pid}, {kill.command}){said}"


def oom_kill_findings(where: str, kills: list[OomKill], first_vmid: int | None = None, limit: int = 4) -> list[str]:
    """One line per kill (``first_vmid``'s first): who was killed, in which container, which limit was reached, and
    what raises it."""
    ordered = sorted(kills, key=lambda k: (k.vmid != first_vmid, -(k.at or 0)))
    lines = [f"{where}: {oom_kill_text(kill)}" for kill in ordered[:limit]]
    if len(ordered) > limit:
        lines.append(f"{where}: {len(ordered) - limit} more OOM kill(s)")
    return lines


def oom_kill_text(kill: OomKill) -> str:
    inside = f" in CT {kill.vmid}" if kill.vmid is not None else ""
    held = f", holding {kill.anon_rss_kib / 1024 / 1024:.1f} GiB of its own memory" if kill.anon_rss_kib else ""
    text = f"the kernel's OOM killer killed PID {kill.pid} ({kill.command}){inside}{held}"
    if kill.node_ran_out:
        return f"{text}: {kill.reached} (guests, containers and the page cache competing): give the node room, or " \
               "lower what the others hold"
    if kill.container_limit is not None:
        return f"{text}: {kill.reached}: raise it above what loading the model needs (`pct set " \
               f"{kill.container_limit} -memory <MiB>` on the node)"
    if kill.limit_cgroup:
        inside = " (one set inside the container, such as a service's MemoryMax)" if kill.vmid is not None else ""
        return f"{text}: {kill.reached}{inside}"
    return text


@dataclass(frozen=True)
class NodeFaults:
    node: str
    memory: tuple[GpuMemoryErrors, ...] = ()
    memory_problem: str | None = None  # why the counters could not be read
    dropped_fields: tuple[str, ...] = ()  # fields this driver does not know
    xid: tuple[XidEvent, ...] = ()
    xid_problem: str | None = None  # why the kernel log could not be read
    xid_source: str | None = None  # journalctl | dmesg
    oom_kills: tuple[OomKill, ...] = ()  # the kernel OOM killer's kills in the same window


@dataclass(frozen=True)
class FaultSummary:
    findings: tuple[str, ...]  # act on these
    coverage: tuple[str, ...]  # per node: what was read, what the node does not expose
    counts: dict[str, dict[str, dict[str, int]]]  # node -> GPU uuid/index -> growing counters


def summarise_faults(faults: tuple[NodeFaults, ...],
                     previous_counts: dict[str, dict[str, dict[str, int]]] | None = None,
                     window_h: float = 24.0) -> FaultSummary:
    findings: list[str] = []
    coverage: list[str] = []
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for nf in sorted(faults, key=lambda f: f.node):
        gpus = list(nf.memory)
        findings += memory_error_findings(nf.node, gpus, (previous_counts or {}).get(nf.node))
        findings += xid_findings(nf.node, list(nf.xid), gpus_by_bus((g.index, g.pci_bus_id) for g in gpus))
        findings += oom_kill_findings(nf.node, list(nf.oom_kills))
        counts[nf.node] = {g.uuid or str(g.index): g.counts() for g in gpus if g.counts()}
        if nf.memory_problem:
            ecc = nf.memory_problem
        elif not gpus:
            ecc = "no GPU listed"
        else:
            with_ecc = [g for g in gpus if g.ecc_mode == "Enabled"]
            off = [g for g in gpus if g.ecc_mode == "Disabled"]
            parts = []
            if with_ecc:
                errors = sum(g.uncorrected_volatile or 0 for g in with_ecc)
                parts.append(f"ECC on for {len(with_ecc)} GPU(s), {errors} uncorrectable since driver load")
            if off:
                parts.append(f"ECC off on GPU {', '.join(str(g.index) for g in off)}")
            if len(with_ecc) + len(off) < len(gpus):
                parts.append(f"{len(gpus) - len(with_ecc) - len(off)} GPU(s) expose no ECC counters")
            ecc = "; ".join(parts)
        if nf.xid_problem:
            xid = nf.xid_problem
        else:
            xid = f"{len(nf.xid)} Xid event(s) in {window_h:g} h ({nf.xid_source})" if nf.xid else \
                f"no Xid in {window_h:g} h ({nf.xid_source})"
            if nf.oom_kills:
                xid += f"; {len(nf.oom_kills)} OOM kill(s)"
        coverage.append(f"{nf.node}: {ecc}; {xid}")
    return FaultSummary(tuple(findings), tuple(coverage), counts)


def launch_gpu_health(faults: NodeFaults, uuids: tuple[str, ...]) -> tuple[str, str]:
    """The pre-flight's word on the GPUs a launch will use: ``fail`` when one needs service,
    ``warn`` on a hardware signal worth knowing before a 10-minute load, else ``ok``; with why."""
    gpus = [g for g in faults.memory if not uuids or g.uuid in uuids]
    bus = gpus_by_bus((g.index, g.pci_bus_id) for g in gpus)
    # hardware Xids on these GPUs (an application's own faults are the previous run's business)
    events = [e for e in faults.xid if e.code not in APPLICATION_XIDS and (not uuids or _bus(e.pci_bus_id) in bus)]
    failed = [g for g in gpus if g.remapped_failure]
    if failed:
        return "fail", "; ".join(f"GPU {g.index}: row remapping FAILED — it needs service" for g in failed)
    problems = memory_error_findings(faults.node, gpus)
    problems += xid_findings(faults.node, events, bus)
    if problems:
        return "warn", "; ".join(p.removeprefix(f"{faults.node} ") for p in problems)
    unread = [p for p in (faults.memory_problem, faults.xid_problem) if p]
    seen = "no ECC or Xid problem on these GPUs in 24 h"
    return "ok", seen + (f" ({'; '.join(unread)})" if unread else "")


def container_memory_mib(pct_config: str) -> tuple[int, int]:
    """A container's RAM limit and swap in MiB from ``pct config <vmid>`` (Proxmox's default, 512 each, where the
    configuration leaves a key out)."""
    values = dict(line.split(":", 1) for line in pct_config.splitlines() if ":" in line and not line.startswith("#"))

    def mib(key: str) -> int:
        text = values.get(key, "").strip()
        return int(text) if text.isdigit() else 512

    return mib("memory"), mib("swap")


def launch_memory_health(vmid: int, pct_config: str | None, kills: Iterable[OomKill]) -> tuple[str, str]:
    """The pre-flight's word on the container's RAM: its limit, and a warning when the kernel's OOM killer killed a
    process in it at that limit (or the node ran out) within the window read: a 10-minute load would meet it again."""
    if pct_config is None:
        return "warn", f"CT {vmid}: its memory limit could not be read (`pct config {vmid}`)"
    memory, swap = container_memory_mib(pct_config)
    limit = f"CT {vmid}: RAM limit {memory / 1024:.1f} GiB (+{swap / 1024:.1f} GiB swap)"
    ours = [k for k in kills if k.vmid == vmid and (k.container_limit == vmid or k.node_ran_out)]
    if not ours:
        return "ok", limit + "; no OOM kill in it in 24 h"
    kill = ours[-1]
    where = "the node ran out of RAM" if kill.node_ran_out else "at this container's limit"
    return "warn", (f"{limit}; the kernel's OOM killer killed PID {kill.pid} ({kill.command}) in it in the last 24 h, "
                    f"{where}" + (f" ({len(ours)} kills)" if len(ours) > 1 else "") +
                    (f": raise the limit (`pct set {vmid} -memory <MiB>`) unless it was raised since"
                     if not kill.node_ran_out else ": free RAM on the node before a 10-minute load"))


# the NVIDIA device nodes a container's config passes in: Proxmox 8.1+ device entries (`dev0: /dev/nvidia0,gid=44`,
# `path=` optional), for which Proxmox also allows the device in the container's cgroup, and raw LXC binds
# (`lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file`), which need an allow rule of their own
_PASSED_NODE = re.compile(r"^\s*(?:(?P<entry>dev)\d+:\s*(?:path=)?|lxc\.mount\.entry:\s*)(?P<path>/dev/nvidia[^\s,]*)",
                          re.M)
# `lxc.cgroup2.devices.allow: c 195:* rwm` (cgroup v1's `lxc.cgroup.devices.allow` too; `a` allows every device)
_CGROUP_ALLOW = re.compile(r"^\s*lxc\.cgroup2?\.devices\.allow\s*[:=]\s*(?P<type>[abc])"
                           r"(?:\s+(?P<major>\d+|\*):(?P<minor>\d+|\*))?", re.M)
UVM_NODE = "/dev/nvidia-uvm"
# the nodes CUDA cannot start without (nvidia-uvm-tools, modeset and the caps serve profilers, displays and MIG)
_CUDA_NEEDS = re.compile(r"/dev/nvidia(?:\d+|ctl|-uvm)")
CHAR_DEVICE = "character special file"  # GNU stat's %F for a device node


def _passed_nodes(pct_config: str) -> dict[str, bool]:
    """The /dev/nvidia* paths ``pct config <vmid>`` passes into the container, in order, each once, with whether a
    `devN:` entry passes it (Proxmox then allows the device itself)."""
    passed: dict[str, bool] = {}
    for match in _PASSED_NODE.finditer(pct_config):
        passed[match.group("path")] = passed.get(match.group("path"), False) or bool(match.group("entry"))
    return passed


def nvidia_nodes_passed(pct_config: str) -> tuple[str, ...]:
    return tuple(_passed_nodes(pct_config))


@dataclass(frozen=True)
class DeviceNode:
    """A path as ``stat`` sees it inside the container: its file type in stat's words (%F) and, for a device, its
    major and minor number."""

    path: str
    kind: str
    major: int
    minor: int

    @property
    def is_device(self) -> bool:
        return self.kind == CHAR_DEVICE

    def __str__(self) -> str:
        return f"{self.path} (device {self.major}:{self.minor})" if self.is_device else f"{self.path} ({self.kind})"


def device_nodes_from_stat(text: str) -> dict[str, DeviceNode]:
    """``stat -c '%n|%F|%t|%T'`` lines (major and minor in hex) by path; a path stat could not find has no line."""
    nodes = {}
    for line in text.splitlines():
        parts = line.rsplit("|", 3)
        if len(parts) == 4:
            path, kind, major, minor = parts
            try:
                nodes[path] = DeviceNode(path, kind, int(major, 16), int(minor, 16))
            except ValueError:
                continue
    return nodes


@dataclass(frozen=True)
class DeviceRule:
    """One cgroup allow rule; None for `*`."""

    type: str  # a | b | c
    major: int | None
    minor: int | None

    def allows(self, node: DeviceNode) -> bool:
        return self.type == "a" or (self.type == "c" and self.major in (None, node.major)
                                    and self.minor in (None, node.minor))

    def __str__(self) -> str:
        if self.type == "a":
            return "a"
        return f"{self.type} {'*' if self.major is None else self.major}:{'*' if self.minor is None else self.minor}"


def cgroup_allow_rules(pct_config: str) -> tuple[DeviceRule, ...]:
    def number(text: str | None) -> int | None:
        return int(text) if text and text != "*" else None

    return tuple(DeviceRule(m.group("type"), number(m.group("major")), number(m.group("minor")))
                 for m in _CGROUP_ALLOW.finditer(pct_config))


def cuda_devices_health(vmid: int, pct_config: str | None,
                        inside: Mapping[str, DeviceNode] | None = None) -> tuple[str, str] | None:
    """The word on the device nodes CUDA needs (the pre-flight's check, the triage's and the daily report's):
    nvidia-smi answers in a container given /dev/nvidiaN and /dev/nvidiactl alone, but CUDA cannot initialise there
    without /dev/nvidia-uvm (torch: 'CUDA unknown error', no GPUs). ``inside`` is what ``stat`` finds in the
    container (None: not read): a bind the node had no device for when the container started leaves nothing, or the
    empty file ``create=file`` made, and a device a raw bind passes is refused unless a cgroup rule allows its major
    number, which for nvidia-uvm is given when the module loads. None when the config passes no NVIDIA node itself
    (a bind of all /dev, a hook): nothing to judge."""
    by_entry = _passed_nodes(pct_config or "")
    passed = tuple(by_entry)
    if not passed:
        return None
    if UVM_NODE not in passed:
        return "warn", (f"CT {vmid} passes {', '.join(passed)} but not {UVM_NODE}: nvidia-smi works there, CUDA does "
                        f"not (torch reports 'CUDA unknown error' and no GPUs); add `devN: {UVM_NODE}` and "
                        f"`{UVM_NODE}-tools` (Proxmox 8.1+) or their lxc.mount.entry binds, and restart the container")
    summary = f"CT {vmid} passes {UVM_NODE} and {len(passed) - 1} other NVIDIA device node(s)"
    if inside is None:
        return "ok", summary
    absent = [node for path in passed if not (node := inside.get(path, DeviceNode(path, "missing", 0, 0))).is_device]
    if absent:
        return "fail" if _cuda_needs(absent) else "warn", _absent_nodes(vmid, absent)
    bound = [path for path, entry in by_entry.items() if not entry]
    rules = cgroup_allow_rules(pct_config or "")
    denied = [inside[path] for path in bound if not any(rule.allows(inside[path]) for rule in rules)]
    if denied:
        return "warn", _denied_nodes(vmid, denied, rules)
    return "ok", summary + ", each a device inside the container" + (
        ", allowed by its cgroup rules" if bound else "")


def _cuda_needs(nodes: Iterable[DeviceNode]) -> bool:
    return any(_CUDA_NEEDS.fullmatch(node.path) for node in nodes)


def _absent_nodes(vmid: int, absent: list[DeviceNode]) -> str:
    return (f"inside CT {vmid}, {', '.join(map(str, absent))}: not the device node(s) its config passes. Either the "
            "node had no such device when the container last started (an optional bind is then skipped without a "
            "word) or the config gained them since" +
            ("; CUDA cannot initialise there (torch: 'CUDA unknown error')" if _cuda_needs(absent) else "") +
            f". Make sure the node has them (the driver makes {UVM_NODE} at the node's first CUDA call, or at boot "
            "with `nvidia-modprobe -u -c=0`), then restart the container")


def _denied_nodes(vmid: int, denied: list[DeviceNode], rules: tuple[DeviceRule, ...]) -> str:
    majors = sorted({node.major for node in denied})
    return (f"inside CT {vmid}, {', '.join(map(str, denied))}, which its config binds but none of its cgroup rules "
            f"allows (allowed: {', '.join(map(str, rules)) or 'none'}): opening them is refused" +
            ("; CUDA cannot initialise there (cuInit error 999, torch: 'CUDA unknown error')"
             if _cuda_needs(denied) else "") +
            f". {UVM_NODE}'s major number is given when its module loads and can change with a driver or kernel "
            "update; add " + ", ".join(f"`lxc.cgroup2.devices.allow: c {major}:* rwm`" for major in majors) +
            " (or pass the nodes as `devN:` entries, which Proxmox allows itself) and restart the container")
