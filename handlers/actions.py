"""Button clicks: confirmations of destructive actions, cancellations, and remedy launches.

Every click is checked against the clicking user's role (not the requester's), and a pending
action is consumed once from Redis, so a double click or an expired button does nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.core.inventory import Target
from bot.errors import GpuopsError
from bot.incidents import container_changed
from bot.launch import LaunchRequest, free, stop
from handlers.common import answer_click, authorize

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services) -> None:
    @app.action("gpuops_confirm")
    async def confirm(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await ack()
        user = body["user"]["id"]
        channel = (body.get("channel") or {}).get("id", "")
        pending = await _claim(services, client, body, respond, lambda p: CONFIRMED_ACTIONS[p["action"]],
                               ":hourglass: this confirmation expired or was already used; nothing was done")
        if pending is None:
            return
        action = CONFIRMED_ACTIONS[pending["action"]]
        try:
            if pending["action"] == "stop":
                text = await _stop(services, pending, user)
            else:
                text = await _free(services, pending)
        except GpuopsError as exc:
            text = f":warning: {exc.user_message}"
        except Exception:  # signals may have been sent: the audit says it was tried, the bot's log has the error
            await _audit(services, action, user, channel, pending, "failed: an error in the bot (see its log)")
            raise
        # the audit first: what was done on the host is recorded whatever Slack does with the answer
        await _audit(services, action, user, channel, pending, text)
        await answer_click(respond, client, channel, user, text)
        if pending["action"] == "stop" and (stopped := await services.attempts.get(pending["attempt"])):
            await container_changed(services, client, stopped.node, stopped.vmid)

    @app.action("gpuops_cancel")
    async def cancel(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        """Cancelled by the person who asked, or by someone whose role allows the action itself: a confirmation in a
        channel is seen by everyone, and a viewer's click does not take an operator's stop from them. Audited."""
        await ack()

        def refused(p: dict[str, Any], reason: str) -> str:
            who_may = f"only <@{p.get('user')}>, who asked for it, or someone who may do it can cancel it"
            return f"{who_may} ({reason})" if reason else who_may

        pending = await _claim(services, client, body, respond, _role_action,
                               "Already handled or expired; nothing was done.", asker_may=True, refused=refused)
        if pending is None:
            return
        who, channel = body["user"]["id"], (body.get("channel") or {}).get("id", "")
        await _audit(services, _role_action(pending) or str(pending.get("action")), who, channel, pending,
                     "cancelled; nothing was done")
        await respond(text=f"Cancelled by <@{who}>; nothing was done.", replace_original=True)

    @app.action(re.compile(r"^gpuops_remedy_\d+$"))
    async def remedy(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await ack()
        from handlers.sglang import run_launch

        pending = await _claim(services, client, body, respond, lambda _: "sglang.launch",
                               ":hourglass: this button expired or was already used")
        if pending is None:
            return
        target = Target("container", pending["node"], int(pending["vmid"]), pending.get("name"))
        request = LaunchRequest(target, pending["model_path"], tuple(pending["flags"]), body["user"]["id"],
                                pending["channel"])
        try:
            await run_launch(services, client, respond, request)
        except GpuopsError as exc:
            await respond(text=f":warning: {exc.user_message}", response_type="ephemeral", replace_original=False)


CONFIRMED_ACTIONS = {"stop": "sglang.stop", "free": "gpu.free"}  # a pending confirmation's kind -> its role action


def _role_action(pending: dict[str, Any]) -> str:
    """The role action a pending confirmation stands for; "" for a kind it does not name."""
    return CONFIRMED_ACTIONS.get(str(pending.get("action")), "")


async def _claim(services: Services, client: Any, body: dict[str, Any], respond: Any,
                 action_of: Callable[[dict[str, Any]], str], expired: str, asker_may: bool = False,
                 refused: Callable[[dict[str, Any], str], str] = lambda _, reason: reason) -> dict[str, Any] | None:
    """The pending action a button stands for, taken from Redis once, when the person who clicked may do it; else
    None, the person told why. A click refused for its role leaves the pending action as it was (the button stays
    for someone who may, until it expires when it would have). ``asker_may``: the person who asked for it may too,
    whatever their role (a Cancel); ``refused`` words the refusal from the role's reason. An action the pending kind
    does not name (``action_of`` answers "") is the asker's alone."""
    key, user = body["actions"][0]["value"], body["user"]["id"]
    pending = await services.attempts.peek_pending(key)
    if pending is not None:
        if not (asker_may and user == pending.get("user")):
            channel = (body.get("channel") or {}).get("id", "")
            action = action_of(pending)
            decision = await authorize(services, client, action, user, channel) if action else None
            if decision is None or not decision.allowed:
                reason = refused(pending, decision.reason if decision is not None else "")
                await respond(text=f":no_entry: {reason}", response_type="ephemeral", replace_original=False)
                return None
        pending = await services.attempts.take_pending(key)  # None when another click took it meanwhile
    if pending is None:
        await respond(text=expired, response_type="ephemeral", replace_original=False)
    return pending


async def _audit(services: Services, action: str, user: str, channel: str, pending: dict[str, Any],
                 result: str) -> None:
    try:
        await services.store.audit(action=action, user=user, channel=channel, requested_by=pending.get("user", ""),
                                   result=result[:500])
    except GpuopsError as exc:  # the bot's log keeps the record the audit could not
        log.error("audit of %s by %s not recorded (%s): %s", action, user, exc.user_message, result[:500])


async def _stop(services: Services, pending: dict[str, Any], user: str) -> str:
    attempt = await services.attempts.get(pending["attempt"])
    if attempt is None:
        return f":warning: attempt {pending['attempt']} is no longer recorded"
    result = await stop(services.transport, services.inventory, services.attempts, attempt, services.launch, user)
    return views.stopped_text(result)


def _confirmed_processes(pending: dict[str, Any]) -> list[tuple[int, int | None]]:
    """The (PID, start time) pairs a /gpu free confirmation was asked for; a confirmation asked before start times
    were kept has PIDs only, which ``free`` then leaves alone, saying why."""
    if "processes" in pending:
        return [(int(pid), None if started is None else int(started)) for pid, started in pending["processes"]]
    return [(int(pid), None) for pid in pending["pids"]]


async def _free(services: Services, pending: dict[str, Any]) -> str:
    result = await free(services.transport, services.inventory, pending["node"], _confirmed_processes(pending),
                        services.launch)
    return views.freed_text(result, pending["node"])
