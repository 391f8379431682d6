"""Slack listeners for `/gpu`: ack -> parse -> use case -> view -> post."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.core.commands import GpuHelpRequest, parse_gpu_command
from bot.core.inventory import resolve_targets
from bot.errors import GpuopsError, StoreError
from bot.slack import post_messages
from bot.status import read_status, report_record


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
        await ack(f"checking {len(targets)} target{'s' if len(targets) != 1 else ''}…")
        report = await read_status(services.transport, services.inventory, targets,
                                   limits=services.limits, deadline_s=services.settings.status_deadline_s)
        await post_messages(client, command["channel_id"], views.status_messages(report), respond=respond)
        try:
            await services.store.audit(action="gpu.status", user=command.get("user_id", ""),
                                       channel=command.get("channel_id", ""), **report_record(report))
        except StoreError as exc:
            logger.warning("audit failed: %s", exc.user_message)
