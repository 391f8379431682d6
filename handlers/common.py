"""Shared by the listeners: who is asking, may they, and the audit line either way."""

from __future__ import annotations

import time
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.app import Services
from bot.core.roles import Decision, decide

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
