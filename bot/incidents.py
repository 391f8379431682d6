"""Use case: keep each incident thread's summary current.

A thread is linked to a container; every attempt on that container that finishes (ready, failed,
stopped) becomes an observation in the thread's record, which may decide its hypotheses, and the one
summary message at the top of the thread is edited in place. This runs on a mention in the thread,
when a followed launch finishes, and when the sampler finds a ready server gone.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from bot import views
from bot.app import Services
from bot.core.incident import Incident, with_attempts

log = logging.getLogger(__name__)


async def synced(services: Services, incident: Incident) -> Incident:
    """The incident with its container's finished attempts observed, saved."""
    if incident.node is not None and incident.vmid is not None:
        incident = with_attempts(incident, await services.attempts.recent(incident.node, incident.vmid, 20))
    await services.incidents.save(incident)
    return incident


async def refresh_summary(services: Services, client: Any, incident: Incident) -> None:
    """One summary message in the thread, edited in place."""
    attempts = await services.attempts.recent(incident.node, incident.vmid, 20) \
        if incident.node is not None and incident.vmid is not None else []
    message = views.incident_summary(incident, attempts)
    if incident.summary_ts:
        await client.chat_update(channel=incident.channel, ts=incident.summary_ts, text=message.text,
                                 blocks=message.blocks)
        return
    answer = await client.chat_postMessage(channel=incident.channel, thread_ts=incident.thread_ts,
                                           text=message.text, blocks=message.blocks)
    await services.incidents.save(replace(incident, summary_ts=str(answer["ts"])))


async def container_changed(services: Services, client: Any, node: str, vmid: int) -> None:
    """An attempt on this container finished: bring every thread following it up to date. A failure here
    never costs the caller its own work (the next mention in the thread catches up)."""
    try:
        for incident in await services.incidents.following(node, vmid):
            await refresh_summary(services, client, await synced(services, incident))
    except Exception:
        log.exception("updating the incident threads of %s:%s failed", node, vmid)
