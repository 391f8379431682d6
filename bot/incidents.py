"""Use case: keep each incident thread's summary current.

A thread is linked to a container; every attempt on that container that finishes (ready, failed,
stopped) becomes an observation in the thread's record, which may decide its hypotheses, and the one
summary message at the top of the thread is edited in place. This runs on a mention in the thread,
when a followed launch finishes, when the sampler finds a ready server gone, when a triage is
answered in an attempt's thread, and on the scheduler's tick after a terminal changed an attempt or
recorded a word in the thread; each under the thread's lock (bot.store.IncidentStore.locked), so
that none of them saves over another's change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bot import views
from bot.app import Services
from bot.core.attempts import Attempt
from bot.core.incident import Incident, Observation, Recorded, gpu_reading, record_word, with_attempts
from bot.core.inventory import Target
from bot.core.startup_log import progress_recorded
from bot.core.status import assess_node
from bot.slack import UNREACHABLE_ERRORS, slack_error
from bot.triage import TriageReport

log = logging.getLogger(__name__)


async def container_attempts(services: Services, incident: Incident) -> list[Attempt]:
    """The recent attempts on the container the thread follows (none before it is linked to one)."""
    if incident.node is None or incident.vmid is None:
        return []
    return await services.attempts.recent(incident.node, incident.vmid, 20)


def with_finished(services: Services, incident: Incident, attempts: Sequence[Attempt]) -> Incident:
    """The incident with its container's finished attempts observed now (one the bot still watches, as it may yet
    come up, is not finished: see :func:`bot.core.incident.with_attempts`)."""
    return with_attempts(incident, attempts, time.time(), services.launch.launch_timeout_s)


async def synced(services: Services, incident: Incident, attempts: Sequence[Attempt] | None = None) -> Incident:
    """The incident with its container's finished attempts observed, saved."""
    attempts = await container_attempts(services, incident) if attempts is None else attempts
    incident = with_finished(services, incident, attempts)
    await services.incidents.save(incident)
    return incident


async def refresh_summary(services: Services, client: Any, incident: Incident,
                          attempts: Sequence[Attempt] | None = None) -> Incident:
    """One summary message in the thread, edited in place, and only when what it says changed (the scheduler looks
    at every thread whose container's attempts changed, most often with nothing new to show). A summary someone
    deleted is posted again. Saves and returns the incident with the summary it now shows."""
    attempts = await container_attempts(services, incident) if attempts is None else attempts
    incident = await _say_announcements(services, client, incident)
    message = views.incident_summary(incident, attempts)
    digest = message.digest()
    if incident.summary_ts and incident.summary_digest == digest:
        return incident
    summary_ts = incident.summary_ts
    if summary_ts:
        try:
            await client.chat_update(channel=incident.channel, ts=summary_ts, text=message.text,
                                     blocks=message.blocks)
        except Exception as exc:
            if slack_error(exc) != "message_not_found":
                raise
            log.warning("the summary of incident thread %s/%s was deleted; posting it again", incident.channel,
                        incident.thread_ts)
            summary_ts = None
    if not summary_ts:
        answer = await client.chat_postMessage(channel=incident.channel, thread_ts=incident.thread_ts,
                                               text=message.text, blocks=message.blocks)
        summary_ts = str(answer["ts"])
    shown = replace(incident, summary_ts=summary_ts, summary_digest=digest)
    await services.incidents.save(shown)
    return shown


async def _say_announcements(services: Services, client: Any, incident: Incident) -> Incident:
    """Each word recorded from a terminal, said in the thread once: the record is saved after each is posted, so a
    failure part way says none of them twice."""
    while incident.announcements:
        await client.chat_postMessage(channel=incident.channel, thread_ts=incident.thread_ts,
                                      text=views.recorded_text(incident.announcements[0]))
        incident = replace(incident, announcements=incident.announcements[1:])
        await services.incidents.save(incident)
    return incident


async def record_from_terminal(services: Services, thread: Incident, verb: str, text: str, hypothesis_id: str,
                               author: str, now: float) -> tuple[Incident, Recorded]:
    """A hypothesis, decision or note typed in a terminal, recorded in the thread's record under its lock, as a
    mention there would record it. A terminal has no Slack: the word waits in the record, and the container is
    marked, so that the bot's scheduler says it in the thread and edits the summary on its next tick."""
    async with services.incidents.locked(thread.channel, thread.thread_ts):
        incident = await services.incidents.get(thread.channel, thread.thread_ts) or thread  # as it is now
        incident, recorded = record_word(incident, verb, text, hypothesis_id, author, now)
        incident = await synced(services, replace(incident, announcements=(*incident.announcements, recorded)))
    if incident.node is not None and incident.vmid is not None:
        await services.attempts.mark_changed(incident.node, incident.vmid)
    return incident, recorded


async def container_changed(services: Services, client: Any, node: str, vmid: int) -> bool:
    """An attempt on this container changed: bring every thread following it up to date (its attempts read once
    for all of them), and the launch cards that say less than their attempt's record drawn again (a stop from a
    terminal, an edit Slack refused). A failure here never costs the caller its own work: it is logged, and False
    returned when trying again later may help (the scheduler gives the container back; the next mention in the
    thread catches up too). A message Slack will never take an edit in (archived, the bot removed) is left, and does
    not stop the others."""
    try:
        following = await services.incidents.following(node, vmid)
        attempts = await services.attempts.recent(node, vmid, 20)
        behind = await services.attempts.cards_behind([a for a in attempts if a.message_ts])
    except Exception:
        log.exception("reading the incident threads of %s:%s failed", node, vmid)
        return False
    done = True
    for attempt in behind:
        done = await _redraw_card(services, client, attempt) and done
    for listed in following:
        try:
            async with services.incidents.locked(listed.channel, listed.thread_ts):
                incident = await services.incidents.get(listed.channel, listed.thread_ts) or listed  # as it is now
                await refresh_summary(services, client, await synced(services, incident, attempts), attempts)
        except Exception as exc:
            if (error := slack_error(exc)) in UNREACHABLE_ERRORS:
                log.warning("incident thread %s/%s cannot be updated (%s); left as it is", listed.channel,
                            listed.thread_ts, error)
                continue
            log.exception("updating incident thread %s/%s of %s:%s failed", listed.channel, listed.thread_ts,
                          node, vmid)
            done = False
    return done


async def _redraw_card(services: Services, client: Any, attempt: Attempt) -> bool:
    """The attempt's launch card drawn again from its record: its status, and the figures its log gave. False when
    it could not be, and trying again may help."""
    card = views.progress_message(attempt, progress_recorded(attempt.observed))
    try:
        await client.chat_update(channel=attempt.channel, ts=attempt.message_ts, text=card.text, blocks=card.blocks)
    except Exception as exc:
        if (error := slack_error(exc)) not in UNREACHABLE_ERRORS:
            log.exception("redrawing the launch card of attempt %s failed", attempt.id)
            return False
        log.warning("the launch card of attempt %s cannot be edited (%s); left as it is", attempt.id, error)
    await services.attempts.card_redrawn(attempt.id)
    return True


def triage_reading(services: Services, report: TriageReport, now: float) -> Observation | None:
    """The node's GPUs as a triage read them, as a reading in the thread (a leftover's holder seen, or clean GPUs,
    decide hypotheses as a status's reading does); None when the node was not read."""
    if report.snapshot is None:
        return None
    status = assess_node(Target("node", report.attempt.node), report.snapshot, services.limits)
    return gpu_reading(now, [status], "triage")


async def triage_answered(services: Services, client: Any, report: TriageReport, now: float) -> None:
    """A /sglang triage answered in the attempt's thread: when that thread is an incident, the triage's reading of
    the GPUs is observed there and its first cause becomes its hypothesis (as `@gpuops triage` there does), and
    every thread following the container shows the label on the attempt. Like :func:`container_changed`, a failure
    here never costs the triage its answer."""
    attempt = report.attempt
    label = report.finding.label if report.finding else None
    try:
        if label and attempt.thread_ts:
            async with services.incidents.locked(attempt.channel, attempt.thread_ts):
                incident = await services.incidents.get(attempt.channel, attempt.thread_ts)
                if incident is not None:
                    if incident.node is None:  # the thread is about this attempt's container from now on
                        incident = replace(incident, node=attempt.node, vmid=attempt.vmid)
                    if (reading := triage_reading(services, report, now)) is not None:
                        incident = incident.observe(reading)
                    await services.incidents.save(incident.propose_triage(label, attempt.id, now))
    except Exception:
        log.exception("recording the triage of %s in its thread failed", attempt.id)
    await container_changed(services, client, attempt.node, attempt.vmid)
