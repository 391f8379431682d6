"""`@gpuops ...` in an incident thread (slash commands cannot be used in threads).

The thread keeps one summary message current: the attempts in order with what changed and what
happened, and the hypotheses with their status. Events are de-duplicated by event id (Slack
retries Events API deliveries).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.core.attempts import is_attempt_id
from bot.core.commands import log_args
from bot.core.incident import RECORD_VERBS, Incident, gpu_reading, parse_mention, record_word
from bot.core.inventory import Target, resolve_targets
from bot.errors import GpuopsError, StoreError
from bot.incidents import container_attempts, refresh_summary, synced, triage_reading, with_finished
from bot.slack import ChannelPace, post_messages
from bot.status import read_status, with_launches
from handlers.common import authorize

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services) -> None:
    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], body: dict[str, Any], client: Any, say: Any, context: Any) -> None:
        if not await services.store.once(f"event:{body.get('event_id') or event.get('ts')}", ttl_s=3600):
            return  # a retried delivery
        channel = event["channel"]
        thread = event.get("thread_ts") or event["ts"]
        user = event.get("user", "")
        mention = parse_mention(event.get("text", ""), context.bot_user_id or "")
        action = {"triage": "sglang.triage", "log": "sglang.log"}.get(mention.verb, "gpu.status")
        decision = await authorize(services, client, action, user, channel)
        if not decision.allowed:
            await client.chat_postMessage(channel=channel, thread_ts=thread, text=f":no_entry: {decision.reason}")
            return
        async def warn(exc: GpuopsError) -> None:
            await client.chat_postMessage(channel=channel, thread_ts=thread, text=f":warning: {exc.user_message}")

        answers = ThreadAnswers(client, channel, thread, services.pace)
        try:
            # one mention at a time per thread: each reads the record the previous one saved
            async with services.incidents.locked(channel, thread):
                incident = await services.incidents.get(channel, thread) or Incident(channel, thread)
                incident = await _link_container(services, incident, thread)
                try:
                    incident = await handle(services, answers, incident, mention.verb, mention.rest, mention.target,
                                            user)
                except GpuopsError as exc:
                    await warn(exc)
                await refresh_summary(services, client, incident)
        except StoreError as exc:  # the thread's lock or record could not be had
            await warn(exc)
        if answers.refused is not None:  # now that the record is kept, the person is told (the app's error handler)
            raise answers.refused


class ThreadAnswers:
    """Where a mention's answers go: its thread. Slack refusing one (a passing ``internal_error``) must not cost the
    thread what the mention recorded, so the refusal is logged and held here, and raised once the record is saved
    and the summary shows it."""

    def __init__(self, client: Any, channel: str, thread: str, pace: ChannelPace) -> None:
        self.client, self.channel, self.thread, self.pace = client, channel, thread, pace
        self.refused: Exception | None = None

    async def post(self, messages: list[views.SlackMessage]) -> None:
        await self._tried(post_messages(self.client, self.channel, messages, thread_ts=self.thread, pace=self.pace))

    async def say(self, text: str, shown_anyway: bool = False) -> None:
        """``shown_anyway``: the summary shows what the text says, so a refusal is only logged."""
        await self._tried(self.client.chat_postMessage(channel=self.channel, thread_ts=self.thread, text=text),
                          shown_anyway)

    async def _tried(self, answer: Awaitable[Any], shown_anyway: bool = False) -> None:
        try:
            await answer
        except Exception as exc:
            log.warning("answering in thread %s/%s failed; what was recorded is kept", self.channel, self.thread,
                        exc_info=True)
            if not shown_anyway:
                self.refused = self.refused or exc


async def _link_container(services: Services, incident: Incident, thread: str) -> Incident:
    """A thread on a launch's card follows that launch's container, however many attempts came after it (a record
    saved before the thread index existed is looked for among the latest attempts)."""
    if incident.node is not None:
        return incident
    attempt = await services.attempts.of_thread(incident.channel, thread)
    if attempt is None:
        attempt = next((a for a in await services.attempts.recent(count=100)
                        if thread in (a.thread_ts, a.message_ts)), None)
    if attempt is None:
        return incident
    from dataclasses import replace

    return replace(incident, node=attempt.node, vmid=attempt.vmid)


async def handle(services: Services, answers: ThreadAnswers, incident: Incident, verb: str, rest: str, hid: str,
                 user: str) -> Incident:
    """What one mention records on the thread's incident, then says there: the record comes first."""
    from dataclasses import replace

    channel = incident.channel
    now = time.time()
    if verb in RECORD_VERBS:
        incident, recorded = record_word(incident, verb, rest, hid, user, now)
        if recorded.kind != "note":  # a note shows in the summary; a hypothesis gets its id, a decision is said
            await answers.say(views.recorded_text(recorded), shown_anyway=True)
    elif verb == "status":
        targets = _targets(services, incident, rest)
        report = await read_status(services.transport, services.inventory, targets, limits=services.limits,
                                   deadline_s=services.settings.status_deadline_s)
        report = await with_launches(report, services.attempts)
        incident = incident.observe(gpu_reading(now, report.statuses))
        if incident.node is None and targets and targets[0].vmid is not None:
            incident = replace(incident, node=targets[0].node, vmid=targets[0].vmid)
        await answers.post(views.status_messages(report))
    elif verb == "triage":
        from handlers.sglang import triaged

        target = _thread_target(services, incident, rest)
        if rest and target is not None:  # the thread is about the container named from now on
            incident = replace(incident, node=target.node, vmid=target.vmid)
        triage, message = await triaged(services, rest or None, target, user, channel)
        if (reading := triage_reading(services, triage, now)) is not None:  # its snapshot is evidence here too
            incident = incident.observe(reading)
        attempts = await container_attempts(services, incident)
        latest = attempts[0] if attempts else None
        label = latest.observed.get("triage") if latest else None
        if latest and label:
            incident = incident.propose_triage(label, latest.id, now)
        await answers.post([message])
    elif verb == "log":
        from handlers.sglang import log_tail

        spec, lines = log_args(rest.split(), views.MENTION_HELP)
        await answers.post(await log_tail(services, spec, _thread_target(services, incident, spec or ""), lines,
                                          channel))
    elif verb == "history":  # the record as it stands once the container's finished attempts are in it
        attempts = await container_attempts(services, incident)
        incident = with_finished(services, incident, attempts)
        await answers.post(views.thread_history_messages(incident, attempts))
    else:
        await answers.say(views.MENTION_HELP)
    return await synced(services, incident)


def _thread_target(services: Services, incident: Incident, spec: str) -> Target | None:
    """The container a thread's `triage` or `log` reads: the one named, else the thread's own; None for an attempt
    id (or nothing to go on)."""
    if spec and not is_attempt_id(spec):
        (target,) = resolve_targets(spec, services.inventory)
        return target
    if not spec and incident.node is not None:
        return Target("container", incident.node, incident.vmid)
    return None


def _targets(services: Services, incident: Incident, rest: str) -> list[Target]:
    if rest:
        return resolve_targets(rest, services.inventory)
    if incident.node is not None:
        return [Target("node", incident.node)]
    return resolve_targets("all", services.inventory)
