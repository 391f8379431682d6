"""Daily GPU health: samples over time, the report they add up to, and when a post is due.

Pure: samples and the clock come in as values. A scheduled post is computed at send time
from the samples of the last 24 h (not frozen in advance), compared with yesterday's report,
and names every node that could not be read.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot.core.gpu_faults import NodeFaults, summarise_faults
from bot.core.report import LEFT_RUNNING, Launch, LaunchRef, launch_of
from bot.core.status import TargetState, TargetStatus


@dataclass(frozen=True)
class GpuSample:
    at: float
    target: str
    gpu: int
    name: str | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilization_pct: int | None
    temperature_c: int | None
    power_draw_w: float | None
    holders: dict[str, int] = field(default_factory=dict)  # "CT 129" / "host" -> MiB
    driver: str | None = None
    cuda: str | None = None
    power_limit_w: float | None = None  # the enforced cap; absent in samples stored before it was kept


@dataclass(frozen=True)
class Unreachable:
    """A target that gave no GPU rows, and why; ``state`` is its :class:`TargetState` value (a stopped container is
    not read but not at fault either). Samples stored before the state was kept read as unreachable."""
    at: float
    target: str
    problem: str
    state: str = TargetState.UNREACHABLE.value


def samples_from(statuses: tuple[TargetStatus, ...], at: float) -> tuple[list[GpuSample], list[Unreachable]]:
    samples: list[GpuSample] = []
    down: list[Unreachable] = []
    for status in statuses:
        label = status.target.label
        if status.state is not TargetState.OK and not status.rows:
            down.append(Unreachable(at, label, status.problem or status.state.value, status.state.value))
            continue
        snap = status.snapshot
        for row in status.rows:
            holders: dict[str, int] = {}
            for p in row.processes:
                key = f"CT {p.vmid}" if p.vmid else "host"
                holders[key] = holders.get(key, 0) + (p.used_mib or 0)
            g = row.gpu
            samples.append(GpuSample(at, label, g.index, g.name, g.memory_used_mib, g.memory_total_mib,
                                     g.utilization_pct, g.temperature_c, g.power_draw_w, holders,
                                     snap.driver_version if snap else None, snap.cuda_version if snap else None,
                                     g.power_limit_w))
    return samples, down


def launches_holding(statuses: tuple[TargetStatus, ...],
                     launches: Mapping[Launch, LaunchRef]) -> dict[tuple[str, int], tuple[LaunchRef, ...]]:
    """Per (target, GPU index): the recorded launches whose processes hold memory there now."""
    held: dict[tuple[str, int], tuple[LaunchRef, ...]] = {}
    for status in statuses:
        for row in status.rows:
            refs = [ref for p in row.processes if (ref := launch_of(p, status.target.node, launches)) is not None]
            if refs:
                held[(status.target.label, row.gpu.index)] = tuple(dict.fromkeys(refs))
    return held


def _holding(refs: tuple[LaunchRef, ...]) -> str:
    """The launches an idle GPU's memory belongs to; a failed one's server, left running, is memory to take back."""
    return "; ".join(f"{ref.label}: a failed launch's server, `/sglang stop {ref.attempt}` frees it"
                     if ref.status == LEFT_RUNNING else ref.label for ref in refs)


@dataclass(frozen=True)
class GpuDay:
    target: str
    gpu: int
    name: str | None
    samples: int
    memory_peak_mib: int | None
    memory_mean_mib: int | None
    memory_total_mib: int | None
    util_peak_pct: int | None
    util_mean_pct: int | None
    temp_peak_c: int | None
    idle_held_hours: float  # hours with memory held and utilization ~0
    holders_now: dict[str, int]


@dataclass(frozen=True)
class HealthReport:
    generated_at: float
    window_h: float
    gpus: tuple[GpuDay, ...]
    findings: tuple[str, ...]
    unreachable: tuple[str, ...]  # "<target>: <why>", each not read now for a fault (no answer, nvidia-smi failing)
    versions: dict[str, str]  # target -> "driver X / CUDA Y"
    changes: tuple[str, ...]  # since the previous report
    hardware: tuple[str, ...] = ()  # per node: ECC and Xid coverage (what was read, what is not exposed)
    fault_counts: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # for the next report
    stopped: tuple[str, ...] = ()  # "<target>: <why>", containers the node says are not running: not read, not faults

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


IDLE_PCT = 1
HELD_MIB = 1024
OVER_CAP = 1.05  # power.draw readings a few % over the cap are sampling noise at the limit


def build_report(samples: list[GpuSample], down: list[Unreachable], now: float, previous: dict[str, Any] | None,
                 *, window_h: float = 24.0, hot_c: int = 85, idle_hours: float = 2.0,
                 servers: tuple[str, ...] = (), faults: tuple[NodeFaults, ...] = (),
                 containers: tuple[str, ...] = (),
                 held_by: Mapping[tuple[str, int], tuple[LaunchRef, ...]] | None = None) -> HealthReport:
    """The report of the window's samples; ``servers`` and ``containers`` are lines read now (SGLang servers' answers,
    containers whose CUDA devices are not in order); ``held_by``: the recorded launches holding each GPU now
    (:func:`launches_holding`), named where a GPU holds memory while idle."""
    start = now - window_h * 3600
    recent = sorted((s for s in samples if s.at >= start), key=lambda s: s.at)
    by_gpu: dict[tuple[str, int], list[GpuSample]] = {}
    for s in recent:
        by_gpu.setdefault((s.target, s.gpu), []).append(s)
    days: list[GpuDay] = []
    findings: list[str] = []
    for (target, gpu), series in sorted(by_gpu.items()):
        mem = [s.memory_used_mib for s in series if s.memory_used_mib is not None]
        util = [s.utilization_pct for s in series if s.utilization_pct is not None]
        temps = [s.temperature_c for s in series if s.temperature_c is not None]
        idle_held = 0.0
        for a, b in zip(series, series[1:], strict=False):
            if (a.memory_used_mib or 0) >= HELD_MIB and (a.utilization_pct or 0) <= IDLE_PCT:
                idle_held += (b.at - a.at) / 3600
        last = series[-1]
        day = GpuDay(target, gpu, last.name, len(series), max(mem) if mem else None,
                     int(statistics.mean(mem)) if mem else None, last.memory_total_mib, max(util) if util else None,
                     int(statistics.mean(util)) if util else None, max(temps) if temps else None,
                     round(idle_held, 1), dict(last.holders))
        days.append(day)
        if idle_held >= idle_hours:
            who = ", ".join(f"{k} {v} MiB" for k, v in last.holders.items()) or "no process listed (orphaned)"
            refs = (held_by or {}).get((target, gpu))
            findings.append(f"{target} GPU {gpu}: memory held while idle for {idle_held:.1f} h — {who}"
                            + (f" ({_holding(refs)})" if refs else ""))
        if (last.memory_used_mib or 0) >= HELD_MIB and not last.holders:
            findings.append(f"{target} GPU {gpu}: {last.memory_used_mib} MiB held with no process listed (orphaned): "
                            f"`/gpu free {target}` finds what keeps it")
        if temps and max(temps) >= hot_c:
            findings.append(f"{target} GPU {gpu}: reached {max(temps)}°C")
        over = [s for s in series if s.power_draw_w is not None and s.power_limit_w
                and s.power_draw_w > s.power_limit_w * OVER_CAP]
        if over:
            peak = max(over, key=lambda s: s.power_draw_w or 0.0)
            findings.append(f"{target} GPU {gpu}: drew {peak.power_draw_w:.0f} W over its {peak.power_limit_w:.0f} W "
                            f"cap in {len(over)} of {len(series)} samples")
    versions: dict[str, str] = {}
    for s in recent:
        if s.driver:
            versions[s.target] = f"driver {s.driver} / CUDA {s.cuda or '?'}"
    if len(set(versions.values())) > 1:
        drift = "; ".join(f"{t}: {v}" for t, v in sorted(versions.items()))
        findings.append(f"driver/CUDA differ across nodes: {drift}")
    latest_down = {u.target: u for u in down if u.at >= start}
    said = {t: u.problem if u.problem.startswith(f"{t}:") else f"{t}: {u.problem}" for t, u in latest_down.items()}
    stopped_now = sorted(t for t, u in latest_down.items() if u.state == TargetState.STOPPED.value)
    unreachable = tuple(said[t] for t in sorted(latest_down) if t not in stopped_now)
    stopped = tuple(said[t] for t in stopped_now)
    changes: list[str] = []
    if previous:
        before = {(g["target"], g["gpu"]): g for g in previous.get("gpus", [])}
        for day in days:
            old = before.get((day.target, day.gpu))
            if old is None:
                changes.append(f"{day.target} GPU {day.gpu}: new since the last report")
                continue
            for holder in sorted(set(day.holders_now) - set(old.get("holders_now", {}))):
                changes.append(f"{day.target} GPU {day.gpu}: {holder} now holds memory")
            for holder in sorted(set(old.get("holders_now", {})) - set(day.holders_now)):
                changes.append(f"{day.target} GPU {day.gpu}: {holder} released its memory")
        for target, version in versions.items():
            old_version = previous.get("versions", {}).get(target)
            if old_version and old_version != version:
                changes.append(f"{target}: {old_version} -> {version}")
        not_read_now = set(latest_down)
        for target in sorted({_target_of(u) for u in previous.get("unreachable", ())} - not_read_now):
            changes.append(f"reachable again: {target}")
        for target in sorted({_target_of(u) for u in previous.get("stopped", ())} - not_read_now):
            changes.append(f"running again: {target}")
    hardware = summarise_faults(faults, (previous or {}).get("fault_counts"), window_h)
    findings += hardware.findings
    findings += containers
    findings += [f"SGLang: {s}" for s in servers]
    return HealthReport(now, window_h, tuple(days), tuple(findings), unreachable, versions, tuple(changes),
                        hardware.coverage, hardware.counts, stopped)


def _target_of(not_read: str) -> str:
    """The target of a report's "<target>: <why>" line; a container's label has a colon of its own
    ("pve5:129 (sglang-a6000): ..."), the reason follows the first colon and space."""
    return not_read.split(": ", 1)[0]


# --------------------------------------------------------------------------- schedules

@dataclass(frozen=True)
class Schedule:
    name: str
    channel: str
    at: str  # "HH:MM" local time
    timezone: str
    targets: str = "all"


def due_occurrence(schedule: Schedule, now: float, grace_h: float = 6.0) -> str | None:
    """The occurrence (local date) that should be posted now: today's time has passed and is
    still within the grace window (a post missed while every replica was down is sent late)."""
    zone = ZoneInfo(schedule.timezone)
    local = datetime.fromtimestamp(now, zone)
    hour, minute = (int(x) for x in schedule.at.split(":"))
    for days_back in (0, 1):
        day = (local - timedelta(days=days_back)).date()
        planned = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        if planned <= local < planned + timedelta(hours=grace_h):
            return day.isoformat()
    return None
