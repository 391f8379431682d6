"""Background work every replica runs, made safe to run on N replicas against one Redis:

* sampling: one replica samples each interval slot (a SET NX claim per slot);
* daily posts: each occurrence of a schedule is claimed once; a post missed while all
  replicas were down is sent late within the grace window, never twice;
* tracking takeover: a launch whose tracker lease lapsed (its replica died) is followed again;
* incident threads: those following a container whose attempts anyone changed (a terminal too, which has no
  Slack) are brought up to date; each changed container is taken by one replica.

The clock is injected, so tests drive time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bot import views
from bot.app import Services
from bot.chart import health_png
from bot.core.attempts import Attempt, AttemptStatus
from bot.core.gpu_faults import NodeFaults
from bot.core.health import HealthReport, Schedule, build_report, due_occurrence, launches_holding, samples_from
from bot.core.inventory import Target, resolve_targets
from bot.core.status import TargetStatus
from bot.errors import GpuopsError
from bot.faults import read_faults
from bot.incidents import container_changed
from bot.launch import container_of, ended_left_running, exit_report, exited_servers, health_probe
from bot.slack import UNREACHABLE_ERRORS, post_messages, slack_error, upload_png
from bot.status import read_cuda_devices, read_status, with_launches
from bot.store import HealthStore

log = logging.getLogger(__name__)

POST_KEPT_S = 3 * 24 * 3600  # how long a scheduled post's claim, and the parts of it Slack has not taken, are kept


@dataclass
class TickResult:
    sampled: bool = False
    posted: list[str] = field(default_factory=list)
    taken_over: list[str] = field(default_factory=list)
    exited: list[str] = field(default_factory=list)  # ready servers found gone, announced in their threads
    ended: list[str] = field(default_factory=list)  # servers left running by a failed launch, found gone: recorded
    unanswering: list[str] = field(default_factory=list)  # ready servers alive but failing their probe, announced
    slow: list[str] = field(default_factory=list)  # ready servers answering, but slower than slow_answer_s, announced
    containers: list[str] = field(default_factory=list)  # whose attempts changed: their threads brought up to date


class Scheduler:
    def __init__(self, services: Services, client: Any, clock: Callable[[], float] = time.time,
                 sample_interval_s: int = 300, grace_h: float = 6.0, slow_answer_s: float | None = None) -> None:
        self.services = services
        self.client = client
        self.clock = clock
        self.sample_interval_s = sample_interval_s
        self.grace_h = grace_h
        self.slow_answer_s = services.settings.slow_answer_s if slow_answer_s is None else slow_answer_s
        self.health = HealthStore(services.store.redis)

    async def tick(self) -> TickResult:
        result = TickResult()
        now = self.clock()
        slot = int(now // self.sample_interval_s)
        if await self.health.claim(f"slot:sample:{slot}", self.services.replica, self.sample_interval_s * 2):
            await self.sample(now)
            result.sampled = True
            result.exited = await self.watch_servers(now)
            ended = await ended_left_running(self.services.transport, self.services.inventory,
                                             self.services.attempts, now)
            result.ended = [a.id for a in ended]  # their cards and threads are brought up to date below
            result.unanswering, result.slow = await self.watch_answers(now)
        for name, post in self.services.inventory.schedules.items():
            schedule = Schedule(name, post.channel, post.at, post.timezone, post.targets)
            occurrence = due_occurrence(schedule, now, self.grace_h)
            if occurrence is None:
                continue
            key = f"post:{name}:{occurrence}"
            if not await self.health.claim(key, self.services.replica, POST_KEPT_S):
                continue
            try:
                await self.post(schedule.channel, schedule.targets, name, now, key=key)
                result.posted.append(f"{name}:{occurrence}")
            except Exception as exc:
                if (error := slack_error(exc)) in UNREACHABLE_ERRORS:  # as refused on every tick: not read again
                    log.error("health post %s cannot be sent to %s (%s): invite the bot to the channel, or name "
                              "another in the inventory's schedules; not tried again", key, schedule.channel, error)
                    continue
                # the occurrence stays due for the next tick (on any replica), which sends what was not sent
                await self.health.unclaim(key)
                log.exception("health post %s failed; will retry", key)
        result.taken_over = await self.take_over()
        result.containers = await self.update_threads()
        return result

    async def update_threads(self) -> list[str]:
        """The incident threads following each container whose attempts changed since the last tick, up to date. A
        container whose threads could not be updated (Slack down) is given back for the next tick."""
        if self.client is None:  # a terminal's report: it leaves the changes to the bot
            return []
        looked = []
        for node, vmid in await self.services.attempts.take_changed():
            if not await container_changed(self.services, self.client, node, vmid):
                await self.services.attempts.mark_changed(node, vmid)
            looked.append(f"{node}:{vmid}")
        return looked

    async def sample(self, now: float) -> None:
        targets = resolve_targets("all", self.services.inventory, self.services.settings.local_gpus)
        report = await read_status(self.services.transport, self.services.inventory, targets,
                                   limits=self.services.limits, deadline_s=self.services.settings.status_deadline_s)
        samples, down = samples_from(report.statuses, now)
        await self.health.add_samples(samples, down, now)

    async def watch_servers(self, now: float) -> list[str]:
        """Ready servers whose process has gone since the last sample: recorded as failed and announced in
        their launch's thread (and channel), with the first cause their own log shows."""
        announced = []
        for gone in await exited_servers(self.services.transport, self.services.inventory,
                                         self.services.attempts, now):
            report = await exit_report(self.services.transport, self.services.attempts, gone)
            attempt = report.attempt
            # its launch card no longer says "ready": drawn from the record with the threads, now or on a bot's tick
            await self.services.attempts.redraw_card_later(attempt)
            if self.client is not None:
                if attempt.channel:  # none when launched from a terminal: the history and threads still say it
                    try:
                        await post_messages(self.client, attempt.channel,
                                            [views.server_exited_message(attempt, report.finding)],
                                            pace=self.services.pace, thread_ts=attempt.thread_ts, broadcast=True)
                    except Exception:  # the failure is recorded in the history either way
                        log.exception("announcing exited server %s failed", attempt.id)
                if not await container_changed(self.services, self.client, attempt.node, attempt.vmid):
                    await self.services.attempts.mark_changed(attempt.node, attempt.vmid)
            announced.append(attempt.id)
        return announced

    async def report(self, targets_spec: str, name: str, now: float) -> HealthReport:
        targets = resolve_targets(targets_spec, self.services.inventory, self.services.settings.local_gpus)
        fresh = await with_launches(await read_status(
            self.services.transport, self.services.inventory, targets, limits=self.services.limits,
            deadline_s=self.services.settings.status_deadline_s), self.services.attempts)
        samples, down = samples_from(fresh.statuses, now)
        await self.health.add_samples(samples, down, now)
        answered = {s.target for s in samples} - {u.target for u in down}
        faults, devices = await asyncio.gather(self.faults(answered, targets, now),
                                               self.container_devices(answered, fresh.statuses))
        recorded, unreachable = await self.health.samples_since(now - 24 * 3600)
        labels = {t.label for t in targets}
        recorded = [s for s in recorded if s.target in labels]
        unreachable = [u for u in unreachable if u.target in labels and u.at >= now - 1]  # named if down *now*
        previous = await self.health.last_report(name)
        servers = await self.servers()
        return build_report(recorded, unreachable, now, previous, hot_c=self.services.settings.hot_c, servers=servers,
                            faults=faults, containers=devices, held_by=launches_holding(fresh.statuses, fresh.launches))

    async def faults(self, answered: set[str], targets: list[Target], now: float) -> tuple[NodeFaults, ...]:
        """ECC counters and Xid events of each node that answered (read on the node itself)."""
        nodes = sorted({t.node for t in targets if t.kind != "local" and t.label in answered})
        deadline = self.services.settings.status_deadline_s * 2

        async def one(node: str) -> NodeFaults:
            try:
                return await asyncio.wait_for(read_faults(self.services.transport, node, now), deadline)
            except TimeoutError:
                why = f"no answer within {deadline:g}s"
            except Exception:  # a fault read must never cost the post itself
                log.exception("reading ECC/Xid on %s failed", node)
                why = "internal error (logged)"
            return NodeFaults(node, memory_problem=f"ECC counters not readable: {why}",
                              xid_problem=f"kernel log not readable: {why}")

        return tuple(await asyncio.gather(*(one(n) for n in nodes)))

    async def container_devices(self, answered: set[str], statuses: Sequence[TargetStatus]) -> tuple[str, ...]:
        """The CUDA devices check of each listed container on a target that answered, where it is not ok: a node
        rebooted without nvidia-uvm leaves containers whose nvidia-smi works and whose CUDA does not. A container
        the status read itself already has its check from that read."""
        inventory = self.services.inventory
        targets = [s.target for s in statuses]
        read = {(s.target.node, s.target.vmid): s.devices for s in statuses
                if s.target.kind == "container" and s.target.label in answered}
        nodes = {t.node for t in targets if t.kind == "node" and t.label in answered}
        wanted = sorted({(c.node, c.vmid, name) for name, c in inventory.containers.items() if c.node in nodes} |
                        {(t.node, t.vmid, t.name) for t in targets if t.kind == "container" and t.vmid is not None
                         and t.label in answered}, key=lambda c: (c[0], c[1]))
        deadline = self.services.settings.status_deadline_s * 2

        async def one(node: str, vmid: int, name: str | None) -> str | None:
            try:
                check = read[(node, vmid)] if (node, vmid) in read else await asyncio.wait_for(
                    read_cuda_devices(self.services.transport, node, vmid), deadline)
            except TimeoutError:
                return None
            except Exception:  # a device read must never cost the post itself
                log.exception("reading the device nodes of %s:%s failed", node, vmid)
                return None
            if check is None or check[0] == "ok":
                return None
            return f"{Target('container', node, vmid, name).label}: CUDA devices: {check[1]}"

        found = await asyncio.gather(*(one(*container) for container in wanted))
        return tuple(line for line in found if line)

    async def probe(self, attempt: Attempt) -> tuple[dict[str, Any] | None, str]:
        """The server's health probe: (its answer, or None when it could not be run, and why)."""
        container = container_of(self.services.inventory, _target(attempt))
        python = container.python
        try:
            out = await self.services.transport.run(attempt.node, health_probe(attempt, python), timeout_s=45,
                                                    ok_exit=(0, 1))
            return json.loads(out.stdout.strip().splitlines()[-1]), ""
        except GpuopsError as exc:
            return None, exc.user_message
        except (ValueError, IndexError):
            return None, "no answer from its health probe"

    async def servers(self) -> tuple[str, ...]:
        """SGLang servers the history says are ready, and whether they answer now."""
        lines = []
        for attempt in await self.services.attempts.with_status("ready"):
            health, why = await self.probe(attempt)
            seconds = None if health is None else _generation_s(health)
            if health is None:
                state = f"could not be checked ({why})"
            elif "error" in health:
                state = f"does NOT answer: {health['error']}"
            elif self._slow(seconds):
                state = f"answers, but SLOWLY: 8 tokens took {seconds:.1f} s (over {self.slow_answer_s:g} s)"
            else:
                state = "answers /health" + (f" (8 tokens in {seconds:.1f} s)" if seconds is not None else "")
            lines.append(f"`{attempt.id}` on {attempt.target_label} port {attempt.port} {state}")
        return tuple(lines)

    def _slow(self, seconds: float | None) -> bool:
        """An answered probe whose generation took longer than ``slow_answer_s``."""
        return seconds is not None and seconds > self.slow_answer_s

    async def watch_answers(self, now: float) -> tuple[list[str], list[str]]:
        """Ready servers whose process lives but that fail their health probe, or answer it slower than
        ``slow_answer_s``, on two samples in a row: each is announced once in its launch's thread (and
        channel), while it stays that way. Returns (not answering, slow)."""
        unanswering: list[str] = []
        slow: list[str] = []
        ttl = 3 * self.sample_interval_s
        for attempt in await self.services.attempts.with_status("ready"):
            health, _ = await self.probe(attempt)
            if health is None:
                continue  # the node did not answer: decide on a later sample, never guess
            seconds = _generation_s(health)
            misses = await self.services.attempts.streak("unanswered", attempt.id, "error" in health, ttl)
            slows = await self.services.attempts.streak("slow", attempt.id, self._slow(seconds), ttl)
            if self.client is None or not attempt.channel:  # no channel: launched from a terminal
                continue
            # said once a streak, from its second probe in a row; a post Slack refused is tried on the next probe
            if misses >= 2 and await self.services.attempts.streak_to_say("unanswered", attempt.id, ttl):
                kind, announced = "unanswered", unanswering
                message = views.server_unanswering_message(attempt, str(health.get("error", "")), now)
            elif slows >= 2 and seconds is not None and await self.services.attempts.streak_to_say(
                    "slow", attempt.id, ttl):
                kind, announced = "slow", slow
                message = views.server_slow_message(attempt, seconds, self.slow_answer_s, now)
            else:
                continue
            try:
                await post_messages(self.client, attempt.channel, [message], pace=self.services.pace,
                                    thread_ts=attempt.thread_ts, broadcast=True)
            except Exception:
                log.exception("announcing server %s failed; tried again on its next probe", attempt.id)
                await self.services.attempts.streak_unsaid(kind, attempt.id)
                continue
            announced.append(attempt.id)
        return unanswering, slow

    async def post(self, channel: str, targets_spec: str, name: str, now: float, respond: Any = None,
                   key: str | None = None) -> None:
        """``respond``: a person asked for it (`/gpu health`), who gets it privately where the bot cannot post.
        ``key``: a scheduled post's occurrence. A report in several messages of which Slack took some and refused
        the next keeps the rest under it, and the next try sends only those: no part is posted twice."""
        unsent = await self.health.unsent(key) if key else None
        if unsent is None:
            report = await self.report(targets_spec, name, now)
            record, messages, first = report.to_dict(), views.health_messages(report), None
        else:
            record, first = unsent["report"], unsent["first_ts"]
            messages = [views.SlackMessage(m["text"], m["blocks"]) for m in unsent["messages"]]
        for n, message in enumerate(messages):
            try:
                posted = await post_messages(self.client, channel, [message], pace=self.services.pace,
                                             respond=respond)
            except Exception:
                if key and (n or unsent is not None):  # some of it is in the channel: only the rest is to be sent
                    await self._keep_unsent(key, {"report": record, "first_ts": first,
                                                  "messages": [asdict(m) for m in messages[n:]]})
                raise
            first = first or (posted[0] if posted else None)
        if key and unsent is not None:
            with contextlib.suppress(Exception):  # expires on its own; a stale one is never read (the key is done)
                await self.health.drop_unsent(key)
        # the report went out: what follows must not have it sent again (a failure before here does, on the next
        # tick), so the chart and the record for the next post's "what changed" are only logged when they fail
        try:
            recorded, _ = await self.health.samples_since(now - 24 * 3600)
            png = health_png(recorded, now, f"GPU memory and utilization, last 24 h ({name})")
            if first:  # not where the report came privately: a file cannot go there
                await upload_png(self.client, channel, first, png, "gpu-health.png", "GPU health")
        except Exception as exc:
            error = slack_error(exc)  # a refusal is said in a line; anything else with its traceback
            log.warning("chart of health post %s not attached (%s)", name, error or type(exc).__name__,
                        exc_info=error is None)
        try:
            await self.health.save_report(name, record)
        except Exception:
            log.exception("health post %s sent but not recorded: the next post compares with the one before", name)

    async def _keep_unsent(self, key: str, unsent: dict[str, Any]) -> None:
        try:
            await self.health.keep_unsent(key, unsent, POST_KEPT_S)
        except Exception:
            log.exception("health post %s: the parts Slack did not take could not be kept; the next try sends it "
                          "whole", key)

    async def take_over(self) -> list[str]:
        """Launches whose tracker lease lapsed: follow them from this replica. Those still `launching`, and those given
        up on with their server left running, within the launch timeout since (a terminal's launch leaves that watch
        to the bot; see :func:`bot.launch.follow`)."""
        from handlers.sglang import track

        taken = []
        watch_s = self.services.launch.launch_timeout_s
        for attempt in await self.services.attempts.holding_servers():
            watched = attempt.may_yet_come_up(time.time(), watch_s)  # wall time, as the follower keeps
            if attempt.status is not AttemptStatus.LAUNCHING and not watched:
                continue
            if await self.services.attempts.leased(attempt.id):
                continue
            self.services.spawn(track(self.services, self.client, attempt))
            taken.append(attempt.id)
        return taken

    async def run(self, every_s: float = 30.0) -> None:
        self.services.tick_every_s, self.services.scheduler_since = every_s, time.monotonic()
        while not self.services.stopping.is_set():
            try:
                await self.tick()
                self.services.ticked_at = time.monotonic()  # the heartbeat /healthz reads
            except Exception:
                log.exception("scheduler tick failed")
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self.services.stopping.wait(), every_s)


def _generation_s(health: dict[str, Any]) -> float | None:
    """How long the probe's 8-token generation took, when it answered (older probes did not time it)."""
    seconds = health.get("generation_s")
    return float(seconds) if "error" not in health and isinstance(seconds, (int, float)) else None


def _target(attempt: Any) -> Any:
    return Target("container", attempt.node, attempt.vmid, attempt.container)
