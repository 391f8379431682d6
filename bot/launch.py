"""Use cases: pre-flight, launch, follow, stop an SGLang server; free GPU memory by PID.

Slack-agnostic: progress is reported through a callback, so the Slack handlers, the CLI
and the demo share one path. Every remote step is an argv from bot.core.argv; every state
change of an attempt is saved before the next remote step.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from bot.budget import PlannedBudget, plan_budget, read_installed_flags
from bot.core import argv as remote
from bot.core.attempts import (
    ACTIVE,
    GAVE_UP_RUNNING,
    GPUS_CLEAN_CHECK,
    WATCHED_UNTIL,
    Attempt,
    AttemptStatus,
    Check,
    changes_between,
    ct_memory_change,
)
from bot.core.budget import Budget, VerdictKind, stop_launches_first
from bot.core.diagnosis import ECHO, Finding, LaunchContext, cause_line, diagnose, diagnose_excerpt
from bot.core.flags import (
    LaunchFlags,
    bind_host,
    check_model_flag,
    env_words,
    flag_value,
    parse_sglang_flags,
    redacted,
    secret_value,
    server_host,
    without_flags,
)
from bot.core.gpu import DeviceHolder, GpuProcess, SmiSnapshot
from bot.core.gpu_faults import (
    DeviceNode,
    NodeFaults,
    OomKill,
    container_memory_mib,
    cuda_devices_health,
    launch_gpu_health,
    launch_memory_health,
    server_kill,
    silent_death_note,
)
from bot.core.incident import person
from bot.core.installed_flags import (
    GPUOPS_TABLE,
    FlagProblem,
    InstalledFlags,
    corrected_argv,
    flag_problems,
    parse_env_names,
    sglang_variables,
    unread_env,
)
from bot.core.inventory import Container, Inventory, Target
from bot.core.label_evidence import killed_by_the_oom_killer, transformers_older
from bot.core.report import Launch, LaunchRef, age_text, launch_key, memory_holders
from bot.core.shm import shm_health
from bot.core.startup_log import Progress, Stage, advance, observed_of
from bot.core.status import Thresholds
from bot.errors import ContainerDown, GpuopsError, RemoteError, StoreError, UsageError
from bot.faults import read_faults, read_kernel_events
from bot.launch_settings import LaunchSettings
from bot.signals import cleaning_up
from bot.ssh import CommandResult
from bot.status import (
    SmiFailed,
    Transport,
    launch_ref,
    launch_refs_if_read,
    read_dev_shm,
    read_device_holders,
    read_device_nodes,
    read_node,
    read_pct_config,
    read_peer_access,
    running_launches,
)
from bot.store import AttemptStore

log = logging.getLogger(__name__)
HISTORY_FOR_WEIGHTS = 50  # attempts searched for an earlier load of the same checkpoint
# rounds in a row a follower reads again after its reads failed, before it stops and leaves the launch to the
# scheduler's next tick (which follows it again from its log)
FOLLOW_RETRIES = 3


@dataclass(frozen=True)
class LaunchRequest:
    target: Target
    model_path: str
    flags: tuple[str, ...]
    user: str
    channel: str
    force: bool = False


@dataclass(frozen=True)
class Preflight:
    request: LaunchRequest
    checks: tuple[Check, ...]
    planned: PlannedBudget | None
    port: int
    ct_memory_mib: int | None = None  # the container's RAM limit as `pct config` read it
    flag_problems: tuple[FlagProblem, ...] = ()  # flags the installed SGLang would refuse
    corrected_flags: tuple[str, ...] | None = None  # the request's flags with each one's single correction

    @property
    def blocked(self) -> bool:
        return any(c.result == "fail" for c in self.checks)

    @property
    def remedy_budget(self) -> Budget | None:
        """The budget shown with a refusal: none when the installed SGLang would refuse the flags, since its
        remedies are for a launch SGLang would refuse."""
        return self.planned.budget if self.planned is not None and not self.flag_problems else None


def remedy_launches(budget: Budget | None, flags: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each computed remedy that is a flag change, as (the change, the launch's flags with it)."""
    return tuple((r.change, changed) for r in (budget.remedies if budget else ())
                 if (changed := r.launch_flags(flags)) is not None)


def next_launches(pre: Preflight) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What a refused pre-flight offers next, as (the change, the flags): the flags SGLang would refuse corrected,
    when each has one correction (the budget's remedies are for that refused launch); else each remedy."""
    if pre.flag_problems:
        if pre.corrected_flags is None:
            return ()
        return ((", ".join(f"{p.correction} (not {p.given})" for p in pre.flag_problems), pre.corrected_flags),)
    return remedy_launches(pre.planned.budget if pre.planned else None, pre.request.flags)


def launch_title(request: LaunchRequest) -> str:
    """What a pre-flight and its launch are called: the model's last path part, and where."""
    return f"{request.model_path.rstrip('/').rsplit('/', 1)[-1]} on {request.target.label}"


def new_attempt_id(now: float) -> str:
    return time.strftime("a%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(2)


def container_of(inventory: Inventory, target: Target) -> Container:
    assert target.vmid is not None
    return inventory.container_settings(target.node, target.vmid)


def launch_command(inventory: Inventory, pre: Preflight) -> str:
    """The server's command line as the container would run it, secrets redacted: what the pre-flight shows, so
    everyone sees the flags as they were read."""
    python = container_of(inventory, pre.request.target).python
    argv = redacted(launch_argv(pre.request, pre.port))
    env = env_words(argv)
    return shlex.join((*argv[:env], python, "-m", "sglang.launch_server", *argv[env:]))


def launch_argv(request: LaunchRequest, port: int) -> tuple[str, ...]:
    """The launch's words as recorded and run: its environment words first, then ``--model-path`` with the model the
    pre-flight read, the flags, and ``--port`` with the port it checked. The flags' own spellings of those two (an
    alias, ``--port=N``) are taken out, so SGLang cannot be given another model or port than the ones checked."""
    env = env_words(request.flags)
    flags = without_flags(request.flags[env:], "--model-path", "--port")
    return (*request.flags[:env], "--model-path", request.model_path, *flags, "--port", str(port))


# --------------------------------------------------------------------------- pre-flight

async def preflight(transport: Transport, inventory: Inventory, store: AttemptStore, request: LaunchRequest,
                    limits: Thresholds, settings: LaunchSettings) -> Preflight:
    """Every check a launch must pass, read at once over SSH: the container and its GPUs, the port, the GPUs'
    hardware and peer access, the container's memory, SGLang and transformers against the model, the memory
    budget, and the container's launch lock."""
    target = request.target
    container = container_of(inventory, target)
    python = container.python
    flags = parse_sglang_flags(request.flags)  # raises UsageError naming a bad flag
    check_model_flag(request.flags, request.model_path)
    given_port = flag_value(request.flags, "--port")  # the last one given, in any spelling, as SGLang reads it
    port = container.port if given_port is None else int(given_port)
    node = inventory.node(target.node)
    checks: list[Check] = []
    ct_memory_mib: int | None = None

    assert target.vmid is not None
    history = await store.recent(target.node, target.vmid, count=HISTORY_FOR_WEIGHTS)
    budget_task = asyncio.ensure_future(plan_budget(transport, inventory, target, request.model_path, request.flags,
                                                    history))
    host_task = asyncio.ensure_future(read_node(transport, target.node, node.proc_root))
    launches_task = asyncio.ensure_future(launch_refs_if_read(store))
    faults_task = asyncio.ensure_future(read_faults(transport, target.node, time.time()))
    ct_config_task = asyncio.ensure_future(read_pct_config(transport, target.node, target.vmid))
    nodes_task = asyncio.ensure_future(_device_nodes(transport, target.node, target.vmid, ct_config_task))
    bind_at = bind_host(request.flags)
    port_task = asyncio.ensure_future(transport.run(target.node, remote.pct_exec(
        target.vmid, remote.port_bind(python, bind_at, port)),
        ok_exit=(remote.PORT_FREE, remote.PORT_IN_USE, remote.PORT_UNBINDABLE)))
    # NCCL between the launch GPUs makes its shared-memory segments in /dev/shm when they have no peer-to-peer path
    shm_task = asyncio.ensure_future(read_dev_shm(transport, target.node, target.vmid)) \
        if flags.gpus_needed > 1 else None
    # custom all-reduce (on by default at tp > 1) needs peer access between the launch GPUs
    p2p_task = asyncio.ensure_future(read_peer_access(transport, target.node, target.vmid,
                                                      flags.gpu_indices[:flags.tp])) \
        if flags.tp > 1 and "--disable-custom-all-reduce" not in request.flags else None
    # SGLang ignores a variable it does not know: its own names, read from the installed package's source
    env_task = asyncio.ensure_future(transport.run(target.node, remote.pct_exec(
        target.vmid, remote.sglang_env_names(python)))) if sglang_variables(flags.env) else None
    planned: PlannedBudget | None = None
    installed_task: asyncio.Future[InstalledFlags | str] | None = None
    try:
        planned = await budget_task
        installed_task = asyncio.ensure_future(read_installed_flags(transport, store, target, python,
                                                                planned.versions.get("sglang"), request.flags))
        checks.append(Check("container answers", "ok", f"{target.label}: {len(planned.gpu_totals_gib)} GPU(s) "
                                                        f"used, read over SSH"))
    except UsageError as exc:
        checks.append(Check("model and flags", "fail", exc.user_message))
    except (RemoteError, SmiFailed) as exc:
        checks.append(Check("container answers", "fail", getattr(exc, "user_message", str(exc))))
    host: SmiSnapshot | None
    try:
        host = await host_task
    except (RemoteError, SmiFailed, GpuopsError):
        host = None
    if (port_check := await _port_check(port_task, bind_at, port)) is not None:
        checks.append(port_check)

    try:
        faults: NodeFaults | None = await faults_task
    except Exception:  # the hardware check informs; it must not cost the pre-flight
        log.warning("reading ECC/Xid on %s failed", target.node, exc_info=True)
        faults = None
    if planned is not None:
        clean, planned = _gpus_clean(planned, host, limits, await launches_task, target.node)
        checks.append(clean)
        if faults is not None:
            checks.append(Check("GPU hardware", *launch_gpu_health(faults, planned.gpu_uuids)))
        memory_check, ct_memory_mib, devices_check = await _container_checks(ct_config_task, nodes_task, target.vmid,
                                                                             faults)
        checks += [memory_check, *([devices_check] if devices_check else [])]
        checks.append(_sglang_check(planned, python))
        checks.append(_transformers_check(planned))
        if p2p_task is not None:
            checks.append(Check("GPU peer access", *await p2p_task))
        if shm_task is not None and (shm := shm_health(await shm_task, flags.gpus_needed)) is not None:
            checks.append(Check("shared memory", *shm))
        budget = planned.budget
        result = {"fits": "ok", "degraded": "warn" if budget.memory_degraded else "ok",
                  "fails": "fail"}[budget.verdict.value]
        checks.append(Check("memory budget", result, budget.summary))
    # not read when the budget was not planned
    await _drop_unread(nodes_task, ct_config_task, p2p_task, shm_task, launches_task)
    if installed_task is not None:
        installed = await installed_task
        problems = _flag_problems(installed, request.flags, settings)
        checks.append(_flags_check(installed, problems, flags, settings, planned.versions.get("sglang")
                                   if planned is not None else None))
    else:  # the budget's read failed and its check says why; a typo in the flags is still worth naming
        problems = _flag_problems("not read", request.flags, settings)
        if problems:
            checks.append(Check("flags known", "fail", "; ".join(p.describe("gpuops' flag table") for p in problems)))
    if env_task is not None:
        checks.append(await _env_check(env_task, flags.env, planned.versions.get("sglang") if planned else None))
    holder = await store.lock_holder(target.node, target.vmid)
    if holder:
        checks.append(Check("no launch in progress", "fail", f"attempt {holder} holds the launch lock"))
    return Preflight(request, tuple(checks), planned, port, ct_memory_mib, problems,
                     corrected_argv(request.flags, problems))


def _flag_problems(installed: InstalledFlags | str, argv: tuple[str, ...],
                   settings: LaunchSettings) -> tuple[FlagProblem, ...]:
    """The flags the installed SGLang would refuse; when its flags could not be read, those outside gpuops' own
    table (unless such flags are allowed through)."""
    if isinstance(installed, InstalledFlags):
        return flag_problems(installed, argv)
    return () if settings.allow_unknown_flags else flag_problems(GPUOPS_TABLE, argv)


def _flags_check(installed: InstalledFlags | str, problems: tuple[FlagProblem, ...], flags: LaunchFlags,
                 settings: LaunchSettings, version: str | None) -> Check:
    """The launch's flags against the installed SGLang's own parser, else against gpuops' table."""
    sglang = f"SGLang {version}" if version else "the installed SGLang"
    outside_table = [f for f in flags.unknown if f.startswith("--")]
    if isinstance(installed, InstalledFlags):
        if problems:
            return Check("flags known", "fail", "; ".join(p.describe(sglang) for p in problems))
        return Check("flags known", "ok", f"every flag is one {sglang} here accepts" +
                     (f"; the budget does not model {', '.join(outside_table)}" if outside_table else ""))
    unread = f"{sglang}'s own flags could not be read ({installed})"
    if problems:
        return Check("flags known", "fail", "; ".join(p.describe("gpuops' flag table") for p in problems) +
                     f"; {unread}")
    if outside_table and settings.allow_unknown_flags:
        return Check("flags known", "warn", f"{unread}; let through unchecked (GPUOPS_ALLOW_UNKNOWN_FLAGS): "
                     + " ".join(outside_table))
    return Check("flags known", "warn", f"{unread}; checked against gpuops' flag table only")


async def _env_check(env_task: asyncio.Future[CommandResult], env: tuple[str, ...], version: str | None) -> Check:
    """The launch's SGLANG_*/SGL_* variables against the names the installed SGLang's source mentions: one it never
    mentions would be ignored without a word (a typo's intent lost). A warning: a name built at run time is not
    found in the source."""
    sglang = f"SGLang {version}" if version else "the installed SGLang"
    try:
        known = parse_env_names((await env_task).stdout)
    except RemoteError as exc:
        return Check("environment known", "warn", f"{sglang}'s variables could not be read: {exc.last_word}")
    except ValueError as exc:
        return Check("environment known", "warn", f"{sglang}'s variables could not be read: {exc}")
    if known is None:
        return Check("environment known", "warn", "no SGLang package there to read its variables from")
    if problems := unread_env(env, known):
        return Check("environment known", "warn", "; ".join(p.describe(sglang) for p in problems))
    return Check("environment known", "ok", f"{sglang} here knows {', '.join(sglang_variables(env))}")


async def _port_check(port_task: asyncio.Future[CommandResult], host: str, port: int) -> Check | None:
    """Whether the server could bind its address and port now: SGLang binds them only once its model is loaded, so
    a port in use, or an address the container lacks, would fail the launch at its end. None when the container is
    down (the container check says so)."""
    try:
        out = await port_task
    except ContainerDown:
        return None
    except RemoteError as exc:
        return Check("port free", "warn", f"could not check port {port}: {exc.user_message}")
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if out.exit_status == remote.PORT_IN_USE:
        return Check("port free", "fail", f"{where} is already in use")
    if out.exit_status == remote.PORT_UNBINDABLE:
        said = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "no reason given"
        return Check("port free", "fail", f"the server could not listen on {where} in the container ({said}): "
                                          "--host must be an address the container has, or 0.0.0.0 for all")
    return Check("port free", "ok", f"{where} is free")


async def _device_nodes(transport: Transport, node: str, vmid: int,
                        ct_config_task: asyncio.Future[str | None]) -> dict[str, DeviceNode] | None:
    """The device nodes the container's config passes, as found inside it, read as soon as the config is."""
    return await read_device_nodes(transport, node, vmid, await ct_config_task)


async def _container_checks(ct_config_task: asyncio.Future[str | None],
                            nodes_task: asyncio.Future[dict[str, DeviceNode] | None], vmid: int,
                            faults: NodeFaults | None) -> tuple[Check, int | None, Check | None]:
    """What the container's ``pct config`` says: its RAM limit, and whether the kernel's OOM killer met it lately
    (the weights pass through host memory, so a container the OOM killer met at its limit meets it again); and
    whether it passes in the device nodes CUDA needs, and they are devices it may open in there (None when it
    passes no NVIDIA node itself)."""
    ct_config = await ct_config_task
    ct_memory_mib = container_memory_mib(ct_config)[0] if ct_config is not None else None
    memory = Check("container memory", *launch_memory_health(vmid, ct_config, faults.oom_kills if faults else ()))
    devices = cuda_devices_health(vmid, ct_config, await nodes_task)
    return memory, ct_memory_mib, Check("CUDA devices", *devices) if devices else None


def _sglang_check(planned: PlannedBudget, python: str) -> Check:
    """SGLang is installed in the container, and that version loads (and runs well) the model."""
    versions = planned.versions
    sglang = versions.get("sglang")
    budget = planned.budget
    support = [r for r, k in zip(budget.reasons, budget.reason_kinds, strict=True) if k == "support"]
    if not sglang:
        return Check("SGLang installed", "fail", f"no sglang package for {python} in the container")
    if budget.error_text and "is not supported by SGLang" in budget.error_text:
        return Check("SGLang supports the model", "fail", budget.error_text)
    if support:
        return Check("SGLang supports the model", "warn", support[0])
    extra = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "sglang" and v)
    return Check("SGLang supports the model", "ok", f"SGLang {sglang}" + (f" ({extra})" if extra else ""))


async def _drop_unread(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel the reads the pre-flight did not get to; one that already failed has its error collected (logged),
    so asyncio does not report it as never retrieved."""
    for task in tasks:
        if task is None:
            continue
        if task.done():
            if not task.cancelled() and (exc := task.exception()) is not None:
                log.debug("an unused pre-flight read failed: %s", exc)
            continue
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, GpuopsError):
            await task


def _transformers_check(planned: PlannedBudget) -> Check:
    """The checkpoint names the transformers that wrote it; an older one may not know its model_type."""
    installed = planned.versions.get("transformers")
    written = planned.model_transformers
    if not installed:
        return Check("transformers", "warn", "transformers not found in the container's SGLang environment")
    if transformers_older(installed, written):
        return Check("transformers", "warn", f"transformers {installed} is older than the {written} that wrote "
                     "this checkpoint's config.json; an unknown model_type fails at load (KeyError in CONFIG_MAPPING)")
    return Check("transformers", "ok", f"transformers {installed}" + (f" (config written by {written})" if written
                                                                       else ""))


def _gpus_clean(planned: PlannedBudget, host: SmiSnapshot | None, limits: Thresholds,
                launches: Mapping[Launch, LaunchRef], node: str) -> tuple[Check, PlannedBudget]:
    """Who holds memory on the launch GPUs (:func:`memory_holders`): the check, and the budget whose remedy to free the
    GPUs names the recorded launches to stop first."""
    if host is None:
        return Check(GPUS_CLEAN_CHECK, "warn", "the node's process list could not be read"), planned
    holders = memory_holders(host, planned.gpu_uuids, node, launches, limits.orphaned_memory_mib)
    planned = replace(planned, budget=stop_launches_first(planned.budget, holders.launches, holders.others))
    if holders.lines:
        shown = holders.lines[:6]
        return Check(GPUS_CLEAN_CHECK, "fail", "; ".join(shown) + (" …" if len(holders.lines) > 6 else "")), planned
    return Check(GPUS_CLEAN_CHECK, "ok", "no compute process and no held memory on the launch's GPUs"), planned


# --------------------------------------------------------------------------- launch

def request_key(request: LaunchRequest) -> str:
    """Same user, same container, same command: a double click or a repeated command."""
    text = json.dumps([request.user, request.target.node, request.target.vmid, request.model_path,
                       list(request.flags), request.force])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


async def record_refused(store: AttemptStore, inventory: Inventory, pre: Preflight, now: float) -> Attempt:
    """A refused pre-flight is a result too: it goes into the history."""
    attempt = await _new_attempt(store, inventory, pre, now)
    attempt = attempt.moved(AttemptStatus.FAILED, now, "refused by pre-flight")
    await store.save(attempt)
    return attempt


async def _new_attempt(store: AttemptStore, inventory: Inventory, pre: Preflight, now: float) -> Attempt:
    request = pre.request
    target = request.target
    assert target.vmid is not None
    previous = await store.latest(target.node, target.vmid)
    argv = launch_argv(request, pre.port)
    budget = pre.planned.budget if pre.planned else None
    predicted = {} if budget is None else {
        "verdict": budget.verdict.value, "weights_gib": round(budget.weights_gib, 2), "kv_tokens": budget.kv_tokens,
        "mamba_slots": budget.mamba_slots, "max_running_requests": budget.max_running_requests,
        "mem_fraction_static": budget.mem_fraction_static, "error_text": budget.error_text,
        "weights_format": budget.weights_format,
        "sglang": pre.planned.versions.get("sglang") if pre.planned else None,
        "free_mib": min(pre.planned.free_mib) if pre.planned and pre.planned.free_mib else None,
    }
    container = container_of(inventory, target)
    attempt = Attempt(
        id=new_attempt_id(now), user=request.user, channel=request.channel, node=target.node, vmid=target.vmid,
        container=target.name, model_path=request.model_path, argv=argv, port=pre.port, created_at=now,
        changes=changes_between(previous.argv if previous else None, argv) + tuple(
            line for line in (ct_memory_change(previous.observed.get("ct_memory_mib") if previous else None,
                                               pre.ct_memory_mib),) if line),
        checks=pre.checks, predicted=predicted, forced=request.force and pre.blocked,
        observed={"ct_memory_mib": pre.ct_memory_mib} if pre.ct_memory_mib is not None else {},
    )
    attempt = replace(attempt, log_path=f"{container.log_dir}/{attempt.id}.log")
    return attempt.moved(AttemptStatus.PLANNED, now, "pre-flight " + ("refused" if pre.blocked else "passed"))


async def start(transport: Transport, inventory: Inventory, store: AttemptStore, pre: Preflight,
                settings: LaunchSettings, now: float, planned: Callable[[Attempt], None] | None = None) -> Attempt:
    """Take the container's lock and start the server detached; raises GpuopsError if it cannot. ``planned`` is told
    the attempt once it is recorded, before the server is started.

    Cancelled (Ctrl-C, SIGTERM, the bot stopping) while the server is being started, it waits for the start's answer
    before it lets the cancellation through: the server may be running by then, and with its PID recorded it is a
    launch like any other (a bot follows a launch no one follows; it can be stopped), not a server nothing knows of
    beside an attempt left `planned` and its container locked."""
    if pre.blocked and not pre.request.force:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in pre.checks if c.result == "fail")
        raise UsageError(f"the pre-flight refused this launch: {failed}")
    attempt = await _new_attempt(store, inventory, pre, now)
    target = pre.request.target
    assert target.vmid is not None
    holder = await store.lock(target.node, target.vmid, attempt.id, settings.lock_ttl_s)
    if holder is not None:
        raise UsageError(f"another launch is in progress on {target.label}: attempt {holder}")
    await store.save(attempt)
    if planned is not None:
        planned(attempt)
    container = container_of(inventory, target)
    assert attempt.log_path is not None
    starting = asyncio.ensure_future(transport.run(target.node, remote.pct_exec(target.vmid, remote.sglang_launch(
        container.python, attempt.log_path, attempt.id, attempt.argv)), timeout_s=30))
    try:
        await asyncio.wait([starting])  # a cancellation of this wait leaves the start running
    except asyncio.CancelledError:
        with cleaning_up(), contextlib.suppress(GpuopsError):  # a start that failed is recorded so, its lock given back
            await _started(store, attempt, starting, "; the command that started it was stopped meanwhile")
        raise
    return await _started(store, attempt, starting)


async def _started(store: AttemptStore, attempt: Attempt, starting: asyncio.Future[CommandResult],
                   note: str = "") -> Attempt:
    """The attempt as its start's answer leaves it: launching with its server's PID, or failed."""
    try:
        pid = int((await starting).stdout.strip().splitlines()[-1])
    except (GpuopsError, ValueError, IndexError) as exc:
        reason = getattr(exc, "user_message", str(exc))
        failed = replace(attempt.moved(AttemptStatus.FAILED, time.time(), f"could not start: {reason}"),
                         error_line=reason)
        await store.save(failed)
        await store.unlock(attempt.node, attempt.vmid, attempt.id)
        raise UsageError(f"could not start SGLang on {attempt.target_label}: {reason}") from None
    attempt = replace(attempt, pid=pid).moved(AttemptStatus.LAUNCHING, time.time(), f"started, PID {pid}{note}")
    await store.save(attempt)
    return attempt


Notify = Callable[[Attempt, Progress, bool], Awaitable[None]]


async def follow(transport: Transport, inventory: Inventory, store: AttemptStore, attempt: Attempt,
                 notify: Notify, settings: LaunchSettings, replica: str,
                 stopping: asyncio.Event | None = None, watch_given_up: bool = True) -> Attempt:
    """Read the attempt's own log until it is ready, failed or gone; report each stage.

    A launch given up on (no output for the stall timeout, not ready by the launch timeout) fails with its server left
    running. With ``watch_given_up`` its log is read on for up to ``launch_timeout_s`` more: a server that comes up
    after all and passes its health check is recorded ready (:meth:`Attempt.came_up`); one that exits, or says ready
    and fails the check, is recorded so with the cause its log names. A launch already given up on (taken over from a
    terminal or another replica) is watched the same way. The watch also ends when its server is stopped.

    ``stopping`` ends the loop between remote commands (the bot shutting down): the attempt
    stays as it is and its lease expires, so this or another replica picks it up again."""
    assert attempt.log_path is not None and attempt.pid is not None
    container = container_of(inventory, Target("container", attempt.node, attempt.vmid))
    python = container.python
    vmid = attempt.vmid
    progress = Progress()
    offset = 0
    started = attempt.transitions[0].at if attempt.transitions else time.time()
    last_output = time.time()
    given_up = attempt.given_up_at  # None while it is launching
    buffer = ""
    failed_reads = 0  # rounds in a row whose reads failed

    async def pause() -> None:
        if stopping is not None:
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), settings.poll_s)
        else:
            await asyncio.sleep(settings.poll_s)

    try:
        while True:
            if stopping is not None and stopping.is_set():
                return attempt
            try:
                if not await store.lease(attempt.id, replica, settings.lease_ttl_s):
                    return attempt  # another replica follows it now
                stored = await store.get(attempt.id)
                if given_up is None and stored is not None and stored.status is not AttemptStatus.LAUNCHING:
                    return stored  # stopped meanwhile
                if given_up is not None and (stored is None or stored.given_up_at is None):
                    return stored or attempt  # its server was stopped, or found ended, meanwhile
                chunk = await transport.run(attempt.node, remote.pct_exec(vmid, remote.read_log_from(
                    attempt.log_path, offset)), ok_exit=(0, 1))
                alive = (await transport.run(attempt.node, remote.pct_exec(vmid, remote.process_alive(attempt.pid)),
                                             ok_exit=(0, 1))).exit_status == 0
            except ContainerDown as exc:
                # a container that stopped, or went, runs no server any more: the launch ended with it, and its
                # container's launch lock is given back
                if given_up is not None:  # its end is the sampler's to record, as for any server left running
                    return stored or attempt
                return await _finish(store, attempt, progress, AttemptStatus.FAILED,
                                     f"the server ended with its container during {progress.label}: {exc.user_message}",
                                     notify)
            except (RemoteError, StoreError) as exc:
                # a dropped connection, a busy node, Redis restarting: read again next round, a few times, rather
                # than leave the card stale until the scheduler's next tick; nothing is judged from a failed read
                failed_reads += 1
                if failed_reads > FOLLOW_RETRIES:
                    raise
                log.info("following attempt %s: %s; reading again (%d of %d)", attempt.id, exc.last_word,
                         failed_reads, FOLLOW_RETRIES)
                await pause()
                continue
            failed_reads = 0
            if chunk.stdout:
                offset += len(chunk.stdout.encode())
                buffer += chunk.stdout
                *complete, buffer = buffer.split("\n")
                before = progress
                progress = advance(progress, complete)
                last_output = time.time()
                if progress != before and given_up is None:  # a given-up launch's card says so until it comes up
                    await notify(attempt, progress, False)
            now = time.time()
            if given_up is not None:
                if progress.stage is Stage.READY:
                    return await _came_up(transport, store, attempt, progress, python, notify)
                if not alive:
                    return await _ended_after_give_up(transport, store, attempt, progress) or stored or attempt
                if not attempt.may_yet_come_up(now, settings.launch_timeout_s):
                    # watched long enough: a stop, or the sampler, records its end; the threads following the container
                    # now take it as failed (while watched, it decided nothing there), on the bot's next tick
                    await store.mark_changed(attempt.node, attempt.vmid)
                    return stored or attempt
            elif progress.stage is Stage.READY:
                return await _finish_ready(transport, store, attempt, progress, python, notify)
            elif not alive:
                if not progress.failed:
                    await asyncio.sleep(0.2)  # let the last lines land, then read once more
                    tail = await transport.run(attempt.node, remote.pct_exec(vmid, remote.read_log_from(
                        attempt.log_path, offset)), ok_exit=(0, 1))
                    progress = advance(progress, (buffer + tail.stdout).split("\n"))
                killed = None
                if not progress.error_line or diagnose(progress.error_line).label == ECHO:
                    # a death the log does not explain: the kernel's OOM killer may have done it
                    killed = await _kernel_kill(transport, attempt, started, progress.error_line)
                # the line that names the first cause as a triage reads the whole log, else the first error line
                reason = killed or await _cause_in_log(transport, attempt) or progress.error_line or \
                    f"the server process exited during {progress.label}, with no error line"
                return await _finish(store, attempt, progress, AttemptStatus.FAILED, reason, notify)
            else:
                # given up on, its server still running: left for a person to look at (py-spy dump) or stop
                reason = None
                if now - last_output > settings.stall_timeout_s:
                    reason = (f"no output for {age_text(now - last_output)} after {progress.label} began "
                              f"- a hang at {progress.label}")
                elif now - started > settings.launch_timeout_s:
                    reason = f"not ready after {age_text(settings.launch_timeout_s)}"
                if reason is not None:
                    watched_until = now + settings.launch_timeout_s if watch_given_up else None
                    attempt = await _finish(store, attempt, progress, AttemptStatus.FAILED, reason, notify,
                                            gave_up_running=True, watched_until=watched_until)
                    given_up = attempt.given_up_at  # None when a stop decided it first
                    if not watch_given_up or given_up is None:
                        return attempt
            await pause()
    finally:
        with contextlib.suppress(StoreError):  # Redis did not answer: the lease lapses by itself
            await store.drop_lease(attempt.id, replica)


async def _oom_kills_since(transport: Transport, attempt: Attempt, since: float) -> list[OomKill]:
    """The OOM killer's kills in the node's kernel log since ``since`` (none when it is not readable: the caller's
    answer stands without them)."""
    try:
        events = await read_kernel_events(transport, attempt.node, since - 60)
    except GpuopsError as exc:
        log.warning("reading %s's kernel log for %s: %s", attempt.node, attempt.id, exc.user_message)
        return []
    return events.oom_kills


async def _kernel_kill(transport: Transport, attempt: Attempt, started: float, last_word: str | None) -> str | None:
    """Why a launch died without a word of its own, when the node's kernel log has the OOM killer killing its
    process since it started."""
    kill = server_kill(await _oom_kills_since(transport, attempt, started), attempt.vmid)
    return silent_death_note(kill, last_word) if kill is not None else None


async def _finish(store: AttemptStore, attempt: Attempt, progress: Progress, status: AttemptStatus, note: str,
                  notify: Notify, gave_up_running: bool = False, watched_until: float | None = None) -> Attempt:
    """The attempt moved to ``status``, with the log's readings; ``gave_up_running``: failed while its server still
    runs (see :attr:`Attempt.left_running`), its log read on until ``watched_until`` (when it is)."""
    left: dict[str, Any] = {GAVE_UP_RUNNING: True} if gave_up_running else {}
    if gave_up_running and watched_until is not None:
        left[WATCHED_UNTIL] = round(watched_until)

    def finished(current: Attempt) -> Attempt | None:
        if current.status is not AttemptStatus.LAUNCHING:
            return None  # another writer (a stop) decided it first
        # what others recorded meanwhile (a triage of the running launch) is kept beside the log's readings
        return replace(current.moved(status, time.time(), note[:300]),
                       observed={**current.observed, **observed_of(progress), **left},
                       error_line=note if status is AttemptStatus.FAILED else None)

    current = await store.change(attempt.id, finished)
    if current is None:  # not in the history (it was lost): recorded as it ends
        current = finished(attempt) or attempt
        await store.save(current)
    await store.unlock(attempt.node, attempt.vmid, attempt.id)
    await notify(current, progress, True)
    return current


def health_probe(attempt: Attempt, python: str) -> remote.Argv:
    """The health check of an attempt's server, run in its container, with the server's own API key."""
    return remote.pct_exec(attempt.vmid, remote.health_check(python, server_host(attempt.argv), attempt.port,
                                                             secret_value(attempt.argv, "--api-key")))


async def _health(transport: Transport, attempt: Attempt, python: str) -> dict[str, Any]:
    """The server's answer to its health probe: ``health``, ``models``, ``generation``; or ``error``."""
    result = await transport.run(attempt.node, health_probe(attempt, python), timeout_s=60, ok_exit=(0, 1))
    try:
        health = json.loads(result.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        health = None
    return health if isinstance(health, dict) else {"error": result.stderr.strip()[-300:] or "no answer"}


def _healthy_note(health: dict[str, Any]) -> str:
    return (f"healthy: /health {health.get('health')}, models {health.get('models')}, "
            f"generated {health.get('generation')!r}")


async def _finish_ready(transport: Transport, store: AttemptStore, attempt: Attempt, progress: Progress, python: str,
                        notify: Notify) -> Attempt:
    health = await _health(transport, attempt, python)
    if "error" in health:
        return await _finish(store, attempt, progress, AttemptStatus.FAILED,
                             f"server said ready but the health check failed: {health['error']}", notify)
    return await _finish(store, attempt, progress, AttemptStatus.READY, _healthy_note(health), notify)


async def _came_up(transport: Transport, store: AttemptStore, attempt: Attempt, progress: Progress, python: str,
                   notify: Notify) -> Attempt:
    """A launch given up on whose log has said ready since: ready, when its server passes the health check; else it
    stays failed with its server left running, as a launch that fails the check in time does, with that as its first
    error and its card drawn again (no longer watched: its log has nothing more to say)."""
    health = await _health(transport, attempt, python)

    def unhealthy(current: Attempt) -> Attempt | None:
        if current.given_up_at is None:
            return None  # stopped, or found ended, meanwhile
        error = f"server said ready after gpuops gave up on it, but the health check failed: {health['error']}"
        return replace(current, observed={**current.observed, **observed_of(progress)}, error_line=error[:500])

    if "error" in health:
        return await _changed(store, attempt.id, unhealthy, card_behind=True) or attempt

    def came_up(current: Attempt) -> Attempt | None:
        given_up = current.given_up_at
        if given_up is None:
            return None  # stopped, or found ended, meanwhile
        at = time.time()
        note = f"came up {age_text(at - given_up)} after gpuops gave up on it; {_healthy_note(health)}"
        up = current.came_up(at, note)  # before the log's readings: with stage "ready" it may no longer come up
        return replace(up, observed={**up.observed, **observed_of(progress)})

    current = await _changed(store, attempt.id, came_up)
    if current is None:
        return await store.get(attempt.id) or attempt
    await notify(current, progress, True)
    return current


async def _ended_after_give_up(transport: Transport, store: AttemptStore, attempt: Attempt,
                               progress: Progress) -> Attempt | None:
    """A launch given up on whose server then exited by itself: recorded so, its card to be drawn again, with the
    first cause its whole log names now as its first error: the give-up's "no output for ..." was no cause, since the
    log went on. None when a stop recorded its end meanwhile."""
    cause = await _cause_in_log(transport, attempt) or progress.error_line
    at = time.time()

    def ended(current: Attempt) -> Attempt | None:
        if current.given_up_at is None:
            return None
        gone = current.with_server_ended({"exited": _exited(current.pid), "at": at})
        return replace(gone, error_line=(cause or current.error_line or "")[:500] or None,
                       observed={**gone.observed, **observed_of(progress)})

    return await _changed(store, attempt.id, ended, card_behind=True)


# --------------------------------------------------------------------------- stop and free

@dataclass(frozen=True)
class StopResult:
    attempt: Attempt
    signal_used: str
    memory_note: str


async def attempt_to_stop(store: AttemptStore, spec: str, target: Target | None, history: str) -> Attempt:
    """The attempt ``spec`` names (``target`` None), or the one running on the container ``target`` (a failed one
    whose server was left running counts: see :attr:`Attempt.left_running`); ``history``: the command that lists
    them, for the answer when there is none. With more than one running there (servers on different GPUs and
    ports), which to stop is the person's to name: a usage error lists them."""
    if target is None:
        attempt = await store.get(spec)
        if attempt is None:
            raise UsageError(f"no attempt `{spec}` is recorded (`{history}` lists them)")
        return attempt
    assert target.vmid is not None
    active = [a for a in await store.recent(target.node, target.vmid, 20)
              if (a.status in ACTIVE or a.left_running) and a.pid]
    if not active:
        raise UsageError(f"no running attempt on {target.label} (see `{history} {spec}`)")
    if len(active) > 1:
        raise UsageError(f"{len(active)} servers run on {target.label}: "
                         + "; ".join(f"`{ref.attempt}` ({ref.status}, port {ref.port})"
                                     for ref in map(launch_ref, active))
                         + ": name the attempt to stop instead of the container")
    return active[0]


async def stop(transport: Transport, inventory: Inventory, store: AttemptStore, attempt: Attempt,
               settings: LaunchSettings, by: str) -> StopResult:
    """SIGTERM the attempt's process group, SIGKILL after the timeout, then check the memory came back."""
    if attempt.pid is None or attempt.log_path is None:
        raise UsageError(f"attempt {attempt.id} has no recorded PID and log (what tells its server from another "
                         "process): `/gpu free` stops what holds GPU memory by PID")
    vmid = attempt.vmid

    async def process() -> int:
        """remote.LAUNCHED_RUNS, _GONE or _PID_REUSED: only the attempt's own server is ever signalled."""
        assert attempt.pid is not None and attempt.log_path is not None
        out = await transport.run(attempt.node, remote.pct_exec(vmid, remote.launched_process(
            attempt.pid, attempt.log_path)), ok_exit=(0, 1, 2))
        return remote.LAUNCHED_PID_REUSED if out.exit_status is None else out.exit_status

    async def alive() -> bool:
        return await process() == remote.LAUNCHED_RUNS

    found = await process()
    used = "none (it had already exited)"
    if found == remote.LAUNCHED_PID_REUSED:
        used = (f"none: PID {attempt.pid} is another process's now, not writing to this attempt's log, so it was "
                "left alone")
    if found == remote.LAUNCHED_RUNS:
        await transport.run(attempt.node, remote.pct_exec(vmid, remote.kill_group(attempt.pid, "TERM")), ok_exit=(0, 1))
        used = "SIGTERM"
        deadline = time.time() + settings.stop_timeout_s
        while time.time() < deadline and await alive():
            await asyncio.sleep(0.5)
        if await alive():
            await transport.run(attempt.node, remote.pct_exec(vmid, remote.kill_group(attempt.pid, "KILL")),
                                ok_exit=(0, 1))
            used = f"SIGTERM, then SIGKILL after {settings.stop_timeout_s:g}s"
            await asyncio.sleep(1.0)
    node = inventory.node(attempt.node)
    host = await read_node(transport, attempt.node, node.proc_root)
    left = [p for p in host.processes if p.pid == attempt.pid]
    memory = "; ".join(f"GPU {g.index}: {g.memory_used_mib} MiB used" for g in host.gpus)
    note = ("memory NOT returned: " if left else "memory returned: ") + memory

    def stopped(current: Attempt) -> Attempt | None:
        if current.left_running:  # it failed, and stays failed; its server no longer runs
            return current.with_server_ended({"by": by, "signal": used, "memory": note, "at": time.time()})
        if current.status not in (AttemptStatus.PLANNED, AttemptStatus.LAUNCHING, AttemptStatus.READY):
            return None  # another writer (the follower seeing it exit) decided it first
        return current.moved(AttemptStatus.STOPPED, time.time(), f"stopped by {person(by)} ({used}); {note}")

    # its card, if launched in Slack, still says ready: it is drawn again from the record
    current = await store.change(attempt.id, stopped, card_behind=True)
    if current is None:  # not in the history (it was lost): recorded as it ends
        current = stopped(attempt) or attempt
        await store.save(current, card_behind=True)
    await store.unlock(attempt.node, attempt.vmid, attempt.id)
    return StopResult(current, used, note)


async def gpu_holders(transport: Transport, inventory: Inventory,
                      target: Target) -> tuple[list[GpuProcess], SmiSnapshot]:
    """Exactly which PIDs hold GPU memory on a node (or on a container's GPUs), each with the GPU it holds (by index)
    and what the node's /proc says of it (container, process group, start time)."""
    node = inventory.node(target.node)
    host = await read_node(transport, target.node, node.proc_root)
    holders = [replace(p, gpu_index=g.index) for g in host.gpus for p in host.processes_of(g)]
    if target.kind == "container":
        holders = [h for h in holders if h.vmid == target.vmid]
    return holders, host


@dataclass(frozen=True)
class FreePlan:
    """What freeing a target's GPUs would stop: the processes holding GPU memory there, by PID, except a recorded
    launch's. Those are left to stopping the launch, which ends its whole process group and records it; killing them
    here would leave a broken server and a history that says it failed while serving."""

    target: Target
    holders: tuple[GpuProcess, ...]  # what a confirmation stops
    launches: tuple[Attempt, ...]  # recorded launches holding memory there, left alone
    orphaned: tuple[tuple[int, int], ...]  # (GPU index, MiB) held with no process listed: no PID to stop
    # with memory held by no process: the processes holding a GPU open that nvidia-smi lists no memory for (what
    # keeps that memory held, when anything does); a confirmation stops them too
    device_holders: tuple[DeviceHolder, ...] = ()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(sorted({pid for pid, _ in self.processes}))

    @property
    def processes(self) -> tuple[tuple[int, int | None], ...]:
        """What a confirmation stops: each PID with its start time as read now (None when unreadable)."""
        stopped = (*self.holders, *(d.process for d in self.device_holders))
        return tuple(sorted({(h.pid, h.started) for h in stopped if h.pid is not None}))


async def free_plan(transport: Transport, inventory: Inventory, store: AttemptStore, target: Target,
                    limits: Thresholds) -> FreePlan:
    """Exactly which PIDs freeing ``target`` would stop, read now; nothing is stopped here."""
    holders, host = await gpu_holders(transport, inventory, target)
    try:
        launches = await running_launches(store)
    except GpuopsError as exc:
        raise StoreError(f"cannot tell recorded launches apart ({exc.user_message}): nothing listed") from None
    owned: dict[str, Attempt] = {}
    loose = []
    for h in holders:
        key = launch_key(target.node, h.vmid, h.group)
        launch = None if key is None else launches.get(key)
        if launch is None:
            loose.append(h)
        else:
            owned[launch.id] = launch
    orphaned = tuple((g.index, g.memory_used_mib or 0) for g in host.gpus
                     if not host.processes_of(g) and (g.memory_used_mib or 0) >= limits.orphaned_memory_mib)
    device_holders: list[DeviceHolder] = []
    if orphaned:  # memory no listed process holds: who still holds a GPU open, as after a `kill -9` of a server
        listed = {p.pid for p in host.processes}
        for d in await read_device_holders(transport, target.node, inventory.node(target.node).proc_root):
            key = launch_key(target.node, d.process.vmid, d.process.group)
            if d.process.pid in listed or (target.kind == "container" and d.process.vmid != target.vmid):
                continue
            launch = None if key is None else launches.get(key)
            if launch is None:
                device_holders.append(d)
            else:  # a recorded launch's own process: stopped with its launch
                owned[launch.id] = launch
    return FreePlan(target, tuple(loose), tuple(owned.values()), orphaned, tuple(device_holders))


@dataclass(frozen=True)
class FreeResult:
    killed: tuple[int, ...]
    skipped: tuple[str, ...]
    memory_note: str


async def free(transport: Transport, inventory: Inventory, node_name: str,
               processes: Iterable[tuple[int, int | None]], settings: LaunchSettings) -> FreeResult:
    """Stop exactly the confirmed processes (PID and start time, as listed when the stop was asked), and only those
    that still hold GPU memory now and are still the process listed: a PID whose process ended can be a later
    process's by the time someone clicks, and that one was never confirmed."""
    node = inventory.node(node_name)
    host = await read_node(transport, node_name, node.proc_root)
    now = {p.pid: p.started for p in host.processes if p.pid is not None}
    confirmed = dict(processes)
    if any(pid not in now for pid in confirmed):  # confirmed as holding a GPU open: does it still?
        held = await read_device_holders(transport, node_name, node.proc_root)
        now.update({d.process.pid: d.process.started for d in held if d.process.pid is not None})
    targets: list[tuple[int, int]] = []
    skipped: list[str] = []
    for pid, started in sorted(confirmed.items()):
        if pid not in now:
            skipped.append(f"PID {pid} no longer holds GPU memory or a GPU open: left alone")
        elif started is None or now[pid] is None:
            skipped.append(f"PID {pid}: when it started could not be read, so it cannot be told from a later "
                           "process given the same PID: left alone")
        elif now[pid] != started:
            skipped.append(f"PID {pid} is another process now (the one listed ended and its PID was given to a "
                           "later one): left alone")
        else:
            targets.append((pid, started))

    async def send(signal: str, which: list[tuple[int, int]]) -> set[int]:
        """``signal`` to each of ``which`` still the process listed: the PIDs it went to."""
        out = await transport.run(node_name, remote.signal_same_processes(which, signal, node.proc_root))
        return {int(word) for word in out.stdout.split() if word.isdigit()}

    killed: set[int] = set()
    if targets:
        killed = await send("TERM", targets)
        skipped += [f"PID {pid} ended before it was signalled: left alone" for pid, _ in targets if pid not in killed]
        left = [t for t in targets if t[0] in killed]
        deadline = time.time() + settings.stop_timeout_s
        while left:
            running = await send("0", left)
            left = [t for t in left if t[0] in running]
            if not left or time.time() >= deadline:
                break
            await asyncio.sleep(0.5)
        if left:
            await send("KILL", left)
    after = await read_node(transport, node_name, node.proc_root)
    still = [p.pid for p in after.processes if p.pid in killed]
    memory = "; ".join(f"GPU {g.index}: {g.memory_used_mib} MiB used" for g in after.gpus)
    note = (f"still holding: {still}; " if still else "memory returned: ") + memory
    return FreeResult(tuple(sorted(killed)), tuple(skipped), note)


async def _alive(transport: Transport, inventory: Inventory, attempt: Attempt) -> tuple[bool | None, str]:
    """Whether the attempt's process still runs in its container, and if not why; None when that cannot
    be told now (no PID, a node this inventory lacks, a node that does not answer): decide later, never
    guess. A container that is not running holds no server any more."""
    if attempt.pid is None or attempt.log_path is None or attempt.node not in inventory.nodes:
        return None, ""
    try:
        out = await transport.run(attempt.node, remote.pct_exec(attempt.vmid, remote.launched_process(
            attempt.pid, attempt.log_path)), ok_exit=(0, 1, 2))
    except ContainerDown as exc:  # a container that is not running, or gone, runs no server
        return False, (f"its container {attempt.vmid} is not running" if exc.stopped else
                       f"its container {attempt.vmid} is gone from {attempt.node}")
    except RemoteError:
        return None, ""
    if out.exit_status == remote.LAUNCHED_PID_REUSED:
        return False, f"the server's process (PID {attempt.pid}, another process's now) exited"
    return out.exit_status == remote.LAUNCHED_RUNS, _exited(attempt.pid)


def _exited(pid: int | None) -> str:
    """How a server found gone is recorded (see :data:`bot.core.attempts.SERVER_ENDED`)."""
    return f"the server's process (PID {pid}) exited"


async def _changed(store: AttemptStore, attempt_id: str, change: Callable[[Attempt], Attempt | None],
                   card_behind: bool = False) -> Attempt | None:
    """The stored attempt as ``change`` made it, or None when ``change`` left it as it was (``store.change`` answers
    the record either way): ``change`` is asked again of a record another writer moved meanwhile."""
    made: list[Attempt] = []

    def once(current: Attempt) -> Attempt | None:
        made.clear()
        changed = change(current)
        made.extend([changed] if changed is not None else [])
        return changed

    await store.change(attempt_id, once, card_behind=card_behind)
    return made[0] if made else None


async def _record_gone(store: AttemptStore, attempt: Attempt, status: AttemptStatus, at: float,
                       note: str) -> Attempt | None:
    """``attempt`` moved to ``status``, unless another writer moved it since it was read (a stop from a terminal
    while its process was looked for): then None, and the record is left as that writer left it."""
    moved = await _changed(store, attempt.id, lambda current: current.moved(status, at, note)
                           if current.status is attempt.status else None)
    if moved is not None:
        await store.unlock(attempt.node, attempt.vmid, attempt.id)
    return moved


async def _record_server_ended(store: AttemptStore, attempt_id: str, how: dict[str, Any]) -> Attempt | None:
    """How a failed launch's left-running server ended, recorded on the attempt with its card to be drawn again;
    None when it is no longer left running (a stop recorded it meanwhile)."""
    return await _changed(store, attempt_id, lambda current: current.with_server_ended(how)
                          if current.left_running else None, card_behind=True)


async def reconcile(transport: Transport, inventory: Inventory, store: AttemptStore) -> list[Attempt]:
    """After a restart: launching attempts whose PID lives are followed again; the others are orphaned."""
    resumed = []
    for attempt in await store.with_status("launching", "ready"):
        alive, _ = await _alive(transport, inventory, attempt)
        if alive and attempt.status is AttemptStatus.LAUNCHING:
            resumed.append(attempt)
        elif alive is False:
            await _record_gone(store, attempt, AttemptStatus.ORPHANED, time.time(),
                               "the bot restarted and the process was gone")
    return resumed


async def exited_servers(transport: Transport, inventory: Inventory, store: AttemptStore, now: float) -> list[Attempt]:
    """Servers the history says are ready whose process has gone: each is recorded as failed, once
    (the caller runs this in one replica's sampling slot)."""
    gone = []
    for attempt in await store.with_status("ready"):
        alive, why = await _alive(transport, inventory, attempt)
        if alive is not False:
            continue
        when = time.strftime("%H:%M UTC", time.gmtime(now))
        failed = await _record_gone(store, attempt, AttemptStatus.FAILED, now, f"{why} while serving (noticed {when})")
        if failed is not None:
            gone.append(failed)
    return gone


async def ended_left_running(transport: Transport, inventory: Inventory, store: AttemptStore,
                             now: float) -> list[Attempt]:
    """Failed launches whose server was left running (however old) and has since gone by itself: each recorded so,
    once, with its card to be drawn again; no longer named as holding GPUs, nor found by a stop."""
    ended = []
    for attempt in await store.holding_servers():
        if not attempt.left_running:
            continue
        alive, why = await _alive(transport, inventory, attempt)
        if alive is not False:
            continue
        recorded = await _record_server_ended(store, attempt.id, {"exited": why, "at": now})
        ended += [recorded] if recorded is not None else []
    return ended


@dataclass(frozen=True)
class ExitReport:
    attempt: Attempt  # with its first error line, as the log shows it
    finding: Finding | None  # None when the log could not be read


async def _log_excerpt(transport: Transport, attempt: Attempt) -> remote.LogExcerpt | None:
    """The attempt's own log, read at both ends as a triage reads it; None when it cannot be read (said in the
    bot's log: what needed it goes on without)."""
    if not attempt.log_path:
        return None
    try:
        out = await transport.run(attempt.node, remote.pct_exec(attempt.vmid, remote.log_excerpt(attempt.log_path)),
                                  ok_exit=(0,))
    except GpuopsError as exc:
        log.warning("reading the log of %s: %s", attempt.id, exc.user_message)
        return None
    return remote.parse_log_excerpt(out.stdout)


async def _cause_in_log(transport: Transport, attempt: Attempt) -> str | None:
    """The line that shows the first cause the attempt's whole log names (see :func:`cause_line`)."""
    excerpt = await _log_excerpt(transport, attempt)
    if excerpt is None:
        return None
    return cause_line(diagnose_excerpt(excerpt, context=LaunchContext.from_argv(attempt.argv)))


async def exit_report(transport: Transport, store: AttemptStore, attempt: Attempt) -> ExitReport:
    """What the log of a server that exited while serving says: its first cause (the log read at both
    ends), and the first error line recorded on the attempt for its card and the history (the card is drawn from
    the record: an excerpt's stages are not the whole log's)."""
    excerpt = await _log_excerpt(transport, attempt)
    if excerpt is None:
        return ExitReport(attempt, None)
    # a server the kernel killed writes nothing of it: the node's kernel log since it started may name the cause
    finding = killed_by_the_oom_killer(diagnose_excerpt(excerpt, context=LaunchContext.from_argv(attempt.argv)),
                                       await _oom_kills_since(transport, attempt, attempt.created_at), attempt.vmid)
    error = (cause_line(finding) or advance(Progress(), excerpt.text.splitlines()).error_line or "")[:500]
    if error:
        # the record as it is now: a triage of the exited server may have labelled it while its log was read
        attempt = await store.change(attempt.id, lambda current: None if current.error_line == error else
                                     replace(current, error_line=error)) or attempt
    return ExitReport(attempt, finding)


__all__ = ["ExitReport", "LaunchSettings", "Preflight", "VerdictKind", "exit_report", "exited_servers", "follow",
           "free", "gpu_holders", "health_probe", "preflight", "reconcile", "start", "stop"]
