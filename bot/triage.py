"""Use case: triage a launch attempt from its own log, with the evidence a person checks next.

Only the attempt's own log is read, and only if it is its own: the first line the launcher
wrote names the attempt, and the file must not predate it. A log written by another attempt,
or older than this one, is reported as stale instead of diagnosed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bot.budget import PlannedBudget, holders_named, plan_budget
from bot.core import argv as remote
from bot.core.attempts import SERVER_ENDED, Attempt, AttemptStatus, is_attempt_id, relaunch_flags, user_flags
from bot.core.diagnosis import (
    BUSY,
    HARDWARE,
    OCCUPIED,
    OUT_OF_RANGE,
    STILL_STARTING,
    Finding,
    LaunchContext,
    diagnose_excerpt,
)
from bot.core.experiments import BUDGETED_LABELS, Experiment, finding_experiments, unsized_experiment
from bot.core.flags import parse_sglang_flags
from bot.core.gpu import SmiSnapshot
from bot.core.gpu_faults import OomKill, ecc_evidence, gpus_by_bus, oom_kill_findings, xid_findings
from bot.core.inventory import Inventory, Target
from bot.core.label_evidence import (
    busy_evidence,
    driver_evidence,
    killed_by_the_oom_killer,
    occupied_evidence,
    occupied_next_step,
    oom_holders_evidence,
    ordinal_evidence,
    parse_port_holders,
    port_evidence,
    ports_named,
    transformers_evidence,
)
from bot.core.model import holds_recurrent_state
from bot.core.report import Launch, LaunchRef, launch_of, memory_holders
from bot.core.shm import parse_df, shm_evidence
from bot.core.stacks import parse_stack_dumps, stack_lines
from bot.core.status import DEFAULT_THRESHOLDS
from bot.errors import GpuopsError, RemoteError, UsageError
from bot.faults import read_kernel_events, read_memory_errors
from bot.launch import container_of
from bot.status import (
    SmiFailed,
    Transport,
    read_cuda_devices,
    read_dev_shm,
    read_node,
    read_pct_config,
    read_peer_access,
)

if TYPE_CHECKING:
    from bot.store import AttemptStore, Store

log = logging.getLogger(__name__)
# findings whose next check is the GPUs' peer access (custom all-reduce, NCCL's P2P transport)
PEER_ACCESS_LABELS = {"gpu_p2p_unsupported", "nccl_error"}


@dataclass(frozen=True)
class TriageReport:
    attempt: Attempt
    finding: Finding | None
    stale: str | None  # why the log was not diagnosed
    log_lines: int
    gpus: str
    versions: dict[str, str | None]
    disk: str
    xid: tuple[str, ...]  # the kernel log since the attempt started: Xid events, and why it was not read
    planned: PlannedBudget | None  # for BUDGETED_LABELS findings: the budget with its computed remedies
    experiments: tuple[Experiment, ...] = ()  # for the other findings: the label's flag experiments
    peer_access: str | None = None  # for transport findings: the launch GPUs' P2P matrix, summarised
    label_evidence: tuple[str, ...] = ()  # what the label calls for: who holds the port, which transformers
    oom_kills: tuple[str, ...] = ()  # the kernel OOM killer's kills on the node since the attempt started
    snapshot: SmiSnapshot | None = None  # the node's GPUs as the triage read them (None: not readable)
    relaunch: tuple[str, ...] = ()  # the flags that launch the attempt again, which its next experiments change
    stacks: tuple[str, ...] = ()  # for a server that still runs: py-spy's stacks of its processes, or why none


async def find_attempt(attempts: AttemptStore, spec: str | None, target: Target | None,
                       channel: str | None = None) -> Attempt:
    """The attempt a triage (or ``/sglang log``) reads: the one ``spec`` names by id, else the latest launched on
    ``target``'s container (of its 20 newest attempts; a pre-flight's refusals are passed over), else the latest
    launched (from ``channel``, when asked in one)."""
    if spec and is_attempt_id(spec):
        attempt = await attempts.get(spec)
        if attempt is None:
            raise UsageError(f"no attempt `{spec}` is recorded (the history lists them)")
    elif target is not None:
        assert target.vmid is not None
        recent = await attempts.recent(target.node, target.vmid, 20)
        # the newest that started a server: a pre-flight refused since then wrote no log, and its answer said why
        attempt = next((a for a in recent if a.pid), recent[0] if recent else None)
    else:
        attempt = next((a for a in await attempts.recent(count=50) if a.pid and channel in (None, a.channel)), None)
    if attempt is not None and attempt.pid is not None:
        return attempt
    if attempt is not None:
        last = attempt.transitions[-1].note if attempt.transitions else ""
        raise UsageError(f"attempt `{attempt.id}` on {attempt.node}:{attempt.vmid} started no server "
                         f"({attempt.status.value}{': ' + last if last else ''}), so it has no log")
    if target is not None:
        raise UsageError(f"no attempt is recorded on {target.label} (a launch records one)")
    if channel:
        raise UsageError("no attempt was launched from this channel: name a container or an attempt id")
    raise UsageError("no launched attempt is recorded: name a container or an attempt id")


async def record_triage(attempts: AttemptStore, store: Store, report: TriageReport, user: str, channel: str) -> None:
    """The label goes on the attempt (its history line and its thread's summary show it), and into the audit. A launch
    found still starting keeps no label: that is where it was, not how it ended (its thread compares failures by
    label)."""
    attempt = report.attempt
    if report.finding is not None and report.finding.label != STILL_STARTING:
        # the record as it is now: the launch's follower may move it while the log and evidence are read, or
        # while this label is saved
        label = report.finding.label
        await attempts.change(attempt.id, lambda current: replace(current, observed={**current.observed,
                                                                                     "triage": label}))
    await store.audit(action="sglang.triage", user=user, channel=channel, attempt=attempt.id,
                      result=report.finding.label if report.finding else f"stale: {report.stale}")


async def triage_attempt(transport: Transport, inventory: Inventory, attempt: Attempt,
                         others: Callable[[], Awaitable[Sequence[Attempt]]] | None = None,
                         hang_after_s: float | None = None,
                         launches: Callable[[], Awaitable[Mapping[Launch, LaunchRef]]] | None = None) -> TriageReport:
    """The attempt's own log diagnosed, with the evidence a person checks next and the next experiments.
    ``others``: reads the container's other attempts, to name a launch that holds a port this one needed (only a
    port finding reads them); ``hang_after_s``: the silence the launch's follower calls a hang (its stall timeout):
    a log silent for less is still starting, or was stopped on request, not hung; ``launches``: reads the recorded
    launches still running (:func:`bot.status.launch_refs_if_read`), to name a GPU's holder as the launch to stop."""
    target = Target("container", attempt.node, attempt.vmid, attempt.container)
    container = container_of(inventory, target)
    python = container.python
    relaunch = relaunch_flags(attempt, container.port)
    stacks = asyncio.ensure_future(read_stacks(transport, inventory, attempt))
    try:
        read = await _read_in_container(transport, attempt, python)
        held_by = await launches() if launches is not None else {}
        gpus, xid, snapshot, kills = await _node_evidence(transport, inventory, attempt, held_by)
    except BaseException:
        stacks.cancel()
        raise
    kill_lines = tuple(oom_kill_findings(attempt.node, kills, attempt.vmid))
    excerpt = remote.parse_log_excerpt(read.log)
    stale = _stale(attempt, read.stat, excerpt.text)
    if stale:
        stacks.cancel()
        return TriageReport(attempt, None, stale, 0, gpus, read.versions, read.disk, xid, None, oom_kills=kill_lines,
                            snapshot=snapshot, relaunch=relaunch)
    assert read.stat is not None  # a log that could not be stat'ed is refused as stale
    stalled, stopped = _silence(attempt, float(read.stat.split()[0]), time.time())
    context = replace(LaunchContext.from_argv(attempt.argv, _model_types(read.config),
                                              holds_recurrent_state(read.config)),
                      hang_after_minutes=hang_after_s / 60 if hang_after_s else None, stopped_on_request=stopped)
    # a launch the kernel killed writes nothing of it: the node's kernel log names that cause
    finding = killed_by_the_oom_killer(diagnose_excerpt(excerpt, stalled_minutes=stalled, context=context), kills,
                                       attempt.vmid)
    planned, experiments = await _next_experiments(transport, inventory, target, attempt, finding, relaunch)
    if planned is not None and snapshot is not None:
        planned = holders_named(planned, snapshot, held_by, attempt.node, DEFAULT_THRESHOLDS.orphaned_memory_mib)
    peer_access = None
    if finding.label in PEER_ACCESS_LABELS:
        try:
            launch_gpus: tuple[int, ...] | None = parse_sglang_flags(user_flags(attempt.argv)).gpu_indices
        except GpuopsError:  # flags this SGLang parser does not know: every GPU the container sees
            launch_gpus = None
        peer_access = (await read_peer_access(transport, attempt.node, attempt.vmid, launch_gpus))[1]
    if finding.label == OCCUPIED:
        holders = None if snapshot is None else memory_holders(snapshot, (), attempt.node, held_by,
                                                                DEFAULT_THRESHOLDS.orphaned_memory_mib)
        finding = replace(finding, next_step=occupied_next_step(finding.next_step, attempt.node, attempt.vmid,
                                                                holders))
    label_evidence = await _label_evidence(transport, attempt, python, finding, excerpt.text, read, snapshot, others,
                                           held_by)
    return TriageReport(attempt, finding, None, excerpt.text.count("\n"), gpus, read.versions, read.disk, xid, planned,
                        experiments, peer_access, label_evidence, kill_lines, snapshot, relaunch, await stacks)


async def read_stacks(transport: Transport, inventory: Inventory, attempt: Attempt) -> tuple[str, ...]:
    """Where the processes of a server that still runs (a launch loading, hung, or left running) are now, as py-spy
    reads them: what a person looks at first in a hang. Nothing for a server that has ended."""
    if attempt.pid is None or attempt.log_path is None or not (
            attempt.status is AttemptStatus.LAUNCHING or attempt.left_running):
        return ()
    python = container_of(inventory, Target("container", attempt.node, attempt.vmid)).python
    try:
        out = await transport.run(attempt.node, remote.pct_exec(attempt.vmid, remote.stack_dumps(
            attempt.pid, attempt.log_path, python)), timeout_s=120, ok_exit=(0, 1, 2, 3))
    except GpuopsError as exc:
        return (f"no stacks: {exc.user_message}",)
    if out.exit_status == remote.LAUNCHED_GONE:
        return (f"no stacks: its server process (PID {attempt.pid}) has exited",)
    if out.exit_status == remote.LAUNCHED_PID_REUSED:
        return (f"no stacks: PID {attempt.pid} is another process's now, so it was not read",)
    if out.exit_status == remote.STACKS_NO_PY_SPY:
        return ("no stacks: py-spy is not installed in the container (`pip install py-spy` beside its SGLang shows "
                "where each process of a hang waits)",)
    return stack_lines(parse_stack_dumps(out.stdout)) or ("no stacks: no process of its group was found",)


def _silence(attempt: Attempt, written_at: float, now: float) -> tuple[float | None, bool]:
    """How long the attempt's log had gone without output (minutes) while its server still ran: until now for a
    server still running, until the stop for one stopped on request (then True); None when its process ended by
    itself (how long before that it was silent says nothing of a hang)."""
    ended = attempt.observed.get(SERVER_ENDED) or {}
    if attempt.status is AttemptStatus.LAUNCHING or attempt.left_running:
        return max(0.0, now - written_at) / 60, False
    if attempt.status is AttemptStatus.STOPPED and attempt.transitions:
        return max(0.0, attempt.transitions[-1].at - written_at) / 60, True
    if "by" in ended and "at" in ended:  # a server left running, then stopped
        return max(0.0, float(ended["at"]) - written_at) / 60, True
    return None, False


@dataclass(frozen=True)
class _ContainerReads:
    stat: str | None  # "<mtime> <size>" of the log, None when it could not be read
    log: str  # what argv.log_excerpt printed
    versions: dict[str, str | None]
    disk: str
    config: str  # the model's config.json, "" when unreadable


async def _read_in_container(transport: Transport, attempt: Attempt, python: str) -> _ContainerReads:
    """The attempt's log (its head and tail), the installed versions, the free disk and the model's config.json,
    read at once in the container."""
    log = attempt.log_path or ""

    def inside(argv: remote.Argv) -> remote.Argv:
        return remote.pct_exec(attempt.vmid, argv)

    config_path = attempt.model_path.rstrip("/") + "/config.json"
    stat, content, versions_out, disk_out, config_out = await asyncio.gather(
        transport.run(attempt.node, inside(("stat", "-c", "%Y %s", remote.checked_path(log))), ok_exit=(0, 1)),
        transport.run(attempt.node, inside(remote.log_excerpt(log)), ok_exit=(0, 1)),
        transport.run(attempt.node, inside(remote.python_package_versions(
            python, ("sglang", "torch", "transformers", "flashinfer-python"))), ok_exit=(0, 1, 127)),
        transport.run(attempt.node, inside(("df", "-Pk", remote.checked_path(log.rsplit("/", 1)[0] or "/"))),
                      ok_exit=(0, 1)),
        transport.run(attempt.node, inside(remote.read_file(config_path)), ok_exit=(0, 1)),
    )
    try:
        versions = json.loads(versions_out.stdout) if versions_out.exit_status == 0 else {}
    except json.JSONDecodeError:
        versions = {}
    return _ContainerReads(stat.stdout if stat.exit_status == 0 else None, content.stdout, versions,
                           _disk(disk_out.stdout), config_out.stdout if config_out.exit_status == 0 else "")


async def _next_experiments(transport: Transport, inventory: Inventory, target: Target, attempt: Attempt,
                            finding: Finding, relaunch: tuple[str, ...]) -> tuple[PlannedBudget | None,
                                                                                  tuple[Experiment, ...]]:
    """The budget engine's remedies for a finding it sizes (from the failed attempt's own measured weights), or the
    same launch again when that budget says it starts; else the label's own flag experiment on ``relaunch``."""
    if finding.label not in BUDGETED_LABELS:
        return None, finding_experiments(finding, relaunch)
    try:
        planned = await plan_budget(transport, inventory, target, attempt.model_path, user_flags(attempt.argv),
                                    (attempt,))
    except GpuopsError:
        return None, ()
    again = unsized_experiment(finding.label, planned.budget, relaunch)
    return planned, (again,) if again else ()


async def _label_evidence(transport: Transport, attempt: Attempt, python: str, finding: Finding, text: str,
                          read: _ContainerReads, snapshot: SmiSnapshot | None,
                          others: Callable[[], Awaitable[Sequence[Attempt]]] | None,
                          held_by: Mapping[Launch, LaunchRef]) -> tuple[str, ...]:
    """What the finding's label calls for: who holds the port, who holds the GPUs, which transformers wrote the
    config, which driver the node runs."""
    if finding.label == "port_in_use":
        launches = {a.pid: a.id for a in (await others() if others else ()) if a.pid and a.id != attempt.id}
        return await _port_holders(transport, attempt, python, finding, text, launches)
    if finding.label == OCCUPIED:
        return occupied_evidence(attempt.node, attempt.vmid, snapshot, held_by)
    if finding.label == BUSY:
        return busy_evidence(snapshot)
    if finding.label == "cuda_driver_too_old":
        devices = await read_cuda_devices(transport, attempt.node, attempt.vmid)
        return driver_evidence(attempt.node, snapshot) + ((devices[1],) if devices else ())
    if finding.label == OUT_OF_RANGE:
        return ordinal_evidence(attempt.node, attempt.vmid, snapshot, user_flags(attempt.argv),
                                await read_pct_config(transport, attempt.node, attempt.vmid))
    if finding.oom is not None and finding.oom.holders:
        return oom_holders_evidence(finding.oom, attempt.node, snapshot.processes if snapshot else (), held_by)
    if finding.label == "nccl_error":
        return (shm_evidence(await read_dev_shm(transport, attempt.node, attempt.vmid), text.splitlines()),)
    if finding.label == HARDWARE:
        return (await _ecc_counters(transport, attempt.node),)
    if finding.label == "transformers_too_old":
        line = transformers_evidence(read.versions.get("transformers"), _config_field(read.config,
                                                                                    "transformers_version"))
        return (line,) if line else ()
    return ()


async def _ecc_counters(transport: Transport, node: str) -> str:
    try:
        gpus, _ = await read_memory_errors(transport, node)
    except GpuopsError as exc:
        return f"ECC counters on {node}: not readable ({exc.user_message[:160]})"
    return ecc_evidence(node, gpus)


async def _port_holders(transport: Transport, attempt: Attempt, python: str, finding: Finding,
                        text: str, launches: dict[int, str]) -> tuple[str, ...]:
    """Who holds the port the launch could not bind, read in the container now: the port(s) the log names
    (its evidence first), else the launch's own --port."""
    named = ports_named(e.text for e in finding.evidence) or ports_named(text.splitlines())
    ports = named or ((attempt.port,) if attempt.port else ())
    if not ports:
        return ()
    answer = await transport.run(attempt.node, remote.pct_exec(attempt.vmid, remote.port_holders(python, ports[:4])),
                                 ok_exit=(0, 1, 127))
    parsed = parse_port_holders(answer.stdout) if answer.exit_status == 0 else None
    if parsed is None:
        return (f"who holds port {', '.join(map(str, ports[:4]))}: not readable in the container "
                f"({(answer.stderr.strip() or 'no answer')[:160]})",)
    return port_evidence(ports[:4], attempt.port, bool(named), *parsed, launches=launches)


def _config_field(config_text: str, name: str) -> str | None:
    try:
        config = json.loads(config_text)
    except json.JSONDecodeError:
        return None
    value = config.get(name) if isinstance(config, dict) else None
    return str(value) if value else None


def _model_types(config_text: str) -> tuple[str, ...]:
    """The checkpoint's model_type and its text_config's (a multimodal wrapper names both)."""
    try:
        config = json.loads(config_text)
    except json.JSONDecodeError:
        return ()
    if not isinstance(config, dict):
        return ()
    nested = config.get("text_config")
    text: dict[str, object] = nested if isinstance(nested, dict) else {}
    return tuple(str(t) for t in (config.get("model_type"), text.get("model_type")) if t)


def _stale(attempt: Attempt, stat: str | None, text: str) -> str | None:
    if stat is None:
        return f"the attempt's log {attempt.log_path} does not exist (yet)"
    first = text.split("\n", 1)[0]
    if not first.startswith(f"gpuops attempt {attempt.id} "):
        shown = first[:80] or "(empty)"
        return (f"{attempt.log_path} was not written by attempt {attempt.id}: its first line is `{shown}`; "
                "refusing to read another run's log as this one's")
    mtime = float(stat.split()[0])
    if mtime < attempt.created_at - 5:
        return f"{attempt.log_path} is older than attempt {attempt.id}: it cannot be this attempt's output"
    return None


def _disk(df: str) -> str:
    row = parse_df(df)
    if row is None:
        return "free disk: unknown"
    return f"free disk on {row.mounted_on}: {row.free_kib / 2**20:.1f} GiB of {row.size_kib / 2**20:.1f} GiB"


async def _node_evidence(transport: Transport, inventory: Inventory, attempt: Attempt,
                         held_by: Mapping[Launch, LaunchRef]
                         ) -> tuple[str, tuple[str, ...], SmiSnapshot | None, list[OomKill]]:
    """The node's GPUs now (who holds them, each with the recorded launch it belongs to: as a line, and the reading
    itself when there is one), and from its kernel log the Xid events and the OOM killer's kills since the attempt
    started."""
    node = inventory.node(attempt.node)
    host, kernel = await asyncio.gather(
        read_node(transport, attempt.node, node.proc_root),
        read_kernel_events(transport, attempt.node, attempt.created_at - 60),
        return_exceptions=True,
    )
    if isinstance(host, BaseException):
        if not isinstance(host, RemoteError | SmiFailed):
            raise host
        gpus = f"GPUs: could not read the node ({getattr(host, 'user_message', host)})"
        bus: dict[str, int] = {}
        snapshot = None
    else:
        snapshot = host
        held = [f"GPU {g.index}: PID {p.pid} ({p.owner}) {p.used_mib} MiB"
                + (f" <- {ref.label}" if (ref := launch_of(p, attempt.node, held_by)) else "")
                for g in host.gpus for p in host.processes_of(g)]
        memory = "; ".join(f"GPU {g.index} {g.memory_used_mib}/{g.memory_total_mib} MiB" for g in host.gpus)
        gpus = f"GPUs now: {memory}" + (f"; held by {', '.join(held)}" if held else "; no process holds GPU memory")
        bus = gpus_by_bus((g.index, g.pci_bus_id) for g in host.gpus)
    if isinstance(kernel, BaseException):
        if isinstance(kernel, RemoteError):
            return gpus, (f"kernel log not readable: {kernel.last_word[:160]}",), snapshot, []
        if not isinstance(kernel, Exception):
            raise kernel
        log.warning("reading the kernel log on %s failed", attempt.node, exc_info=kernel)  # evidence, not the triage
        return gpus, ("kernel log not read: internal error (logged)",), snapshot, []
    return gpus, tuple(xid_findings(attempt.node, kernel.xid, bus)), snapshot, kernel.oom_kills
