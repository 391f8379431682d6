"""Slack listeners for `/gpu`: ack -> parse -> use case -> view -> post."""

from __future__ import annotations

import secrets
import time
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.core.commands import GpuFreeRequest, GpuHealthRequest, GpuHelpRequest, parse_gpu_command
from bot.core.inventory import Target, resolve_targets
from bot.errors import GpuopsError, StoreError
from bot.launch import free_plan
from bot.slack import post_messages
from bot.status import read_status, report_record, with_launches
from handlers.common import authorize


def register(app: AsyncApp, services: Services) -> None:
    @app.command("/gpu")
    async def gpu_command(ack: Any, command: dict[str, Any], client: Any, respond: Any, logger: Any) -> None:
        try:
            request = parse_gpu_command(command.get("text", ""))
            if isinstance(request, GpuHelpRequest):
                await ack(views.help_text(services.inventory))
                return
            targets = resolve_targets(request.target, services.inventory, services.settings.local_gpus)
        except GpuopsError as exc:
            await ack(views.usage_text(exc.user_message, services.inventory))
            return
        if isinstance(request, GpuHealthRequest):
            await ack("building the health report (last 24 h)…")
            from bot.scheduler import Scheduler

            scheduler = Scheduler(services, client)
            await scheduler.post(command["channel_id"], request.target, f"ondemand:{command['channel_id']}",
                                 time.time(), respond=respond)
            return
        if isinstance(request, GpuFreeRequest):
            await ack(f"listing what holds GPU memory on {targets[0].label}…")
            await ask_free(services, client, respond, targets[0], command.get("user_id", ""), command["channel_id"])
            return
        await ack(f"checking {len(targets)} target{'s' if len(targets) != 1 else ''}…")
        decision = await authorize(services, client, "gpu.status", command.get("user_id", ""), command["channel_id"])
        if not decision.allowed:
            await respond(text=f":no_entry: {decision.reason}", response_type="ephemeral")
            return
        report = await read_status(services.transport, services.inventory, targets,
                                   limits=services.limits, deadline_s=services.settings.status_deadline_s)
        report = await with_launches(report, services.attempts)
        await post_messages(client, command["channel_id"], views.status_messages(report), respond=respond,
                            pace=services.pace)
        try:
            await services.store.audit(action="gpu.status", user=command.get("user_id", ""),
                                       channel=command.get("channel_id", ""), **report_record(report))
        except StoreError as exc:
            logger.warning("audit failed: %s", exc.user_message)


async def ask_free(services: Services, client: Any, respond: Any, target: Target, user: str, channel: str) -> None:
    """List exactly which PIDs hold GPU memory; kill nothing until an operator confirms."""
    decision = await authorize(services, client, "gpu.free", user, channel)
    if not decision.allowed:
        await respond(text=f":no_entry: {decision.reason}", response_type="ephemeral")
        return
    try:
        plan = await free_plan(services.transport, services.inventory, services.attempts, target, services.limits)
    except GpuopsError as exc:
        await respond(text=f":warning: {exc.user_message}", response_type="ephemeral")
        return
    if not plan.pids:
        await post_messages(client, channel, [views.note_message(views.nothing_to_free_text(plan))], respond=respond,
                            pace=services.pace)
        return
    pending = secrets.token_hex(8)
    await services.attempts.put_pending(pending, {"action": "free", "node": target.node,
                                                  "processes": [list(p) for p in plan.processes],
                                                  "user": user, "channel": channel, "created": time.time()},
                                        services.settings.confirm_ttl_s)
    message = views.confirm_message(views.free_question(plan), views.free_plan_lines(plan), pending,
                                    services.settings.confirm_ttl_s)
    await post_messages(client, channel, [message], respond=respond, pace=services.pace)
