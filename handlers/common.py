"""Shared by the listeners: who is asking, may they, and the audit line either way."""

from __future__ import annotations

import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.app import Services
from bot.core.roles import Decision, decide
from bot.errors import GpuopsError
from bot.slack import responded

log = logging.getLogger(__name__)

GROUP_CACHE_S = 300.0


async def user_groups(services: Services, client: Any, user: str) -> tuple[str, ...]:
    """The user groups (S...) a user belongs to, cached; none when the app lacks usergroups:read."""
    cached = services.group_cache.get("*")
    if cached is None or time.monotonic() - cached[0] > GROUP_CACHE_S:
        try:
            answer = await client.usergroups_list(include_users=True)
            groups = answer.get("usergroups", []) or []
        except SlackApiError:
            groups = []
        services.group_cache["*"] = (time.monotonic(), tuple(
            f"{g['id']}:{','.join(g.get('users', []) or [])}" for g in groups))
        cached = services.group_cache["*"]
    return tuple(entry.split(":", 1)[0] for entry in cached[1] if user in entry.split(":", 1)[1].split(","))


async def authorize(services: Services, client: Any, action: str, user: str, channel: str) -> Decision:
    groups = await user_groups(services, client, user)
    decision = decide(action, user, groups, channel, services.inventory.roles)
    if not decision.allowed:
        await services.store.audit(action=action, user=user, channel=channel, result="denied", reason=decision.reason)
    return decision


async def say_failure(error: Exception, ref: str, body: dict[str, Any], respond: Any, client: Any) -> None:
    """A command, click or mention that failed past its own handling is answered, not left at its "checking…": a
    GpuopsError says its user message; anything else (a bug of the bot's, Slack refusing the answer) only a
    reference to the bot's log, where the whole error is, never its own text. Privately to the person for a command
    or click; in the thread for a mention."""
    text = (f":warning: {error.user_message}" if isinstance(error, GpuopsError) else
            f":warning: gpuops failed while answering this; the bot's log has the error under reference `{ref}`.")
    event = body.get("event") or {}
    try:
        if respond is not None and body.get("response_url"):
            await respond(text=text, response_type="ephemeral", replace_original=False)
        elif event.get("channel"):
            await client.chat_postMessage(channel=event["channel"], thread_ts=event.get("thread_ts") or event.get("ts"),
                                          text=text)
    except Exception:  # Slack itself may be what failed: the log keeps the error either way
        log.warning("telling the person about error ref=%s failed too", ref, exc_info=True)


async def answer_click(respond: Any, client: Any, channel: str, user: str, text: str) -> None:
    """The result of an action a click confirmed, in place of the confirmation; in the channel when Slack will not
    take it there (the click's response_url expired, was used up, or could not be reached): a person who confirmed a
    stop is told whether it happened, whatever Slack's answer to the first try."""
    if await responded(respond, text=text, replace_original=True) is not None:
        log.warning("saying the result of a click in %s instead", channel)
        await client.chat_postMessage(channel=channel, text=f"<@{user}>: {text}")
