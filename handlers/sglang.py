"""Slack listeners for `/sglang`: ack -> parse -> use case -> view -> post."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.budget import plan_budget
from bot.chart import budget_png
from bot.core.commands import SGLANG_USAGE, SglangHelpRequest, parse_sglang_command
from bot.core.inventory import resolve_targets
from bot.errors import GpuopsError
from bot.slack import post_messages, upload_png


def register(app: AsyncApp, services: Services) -> None:
    @app.command("/sglang")
    async def sglang_command(ack: Any, command: dict[str, Any], client: Any, respond: Any, logger: Any) -> None:
        try:
            request = parse_sglang_command(command.get("text", ""))
            if isinstance(request, SglangHelpRequest):
                await ack(SGLANG_USAGE)
                return
            targets = resolve_targets(request.target, services.inventory)
        except GpuopsError as exc:
            await ack(f":warning: {exc.user_message}")
            return
        if len(targets) != 1 or targets[0].kind != "container":
            await ack(f":warning: `{request.target}` is not one container. {SGLANG_USAGE}")
            return
        target = targets[0]
        await ack(f"planning the memory budget on {target.label}…")
        channel = command["channel_id"]
        try:
            planned = await plan_budget(services.transport, services.inventory, target, request.model_path,
                                        request.flags)
        except GpuopsError as exc:
            await respond(text=f":warning: {exc.user_message}", response_type="ephemeral")
            return
        posted = await post_messages(client, channel, views.budget_messages(planned.budget, planned.title),
                                     respond=respond)
        png = budget_png(planned.budget, list(planned.gpu_totals_gib), planned.title)
        await upload_png(client, channel, posted[0] if posted else None, png, "budget.png", planned.title)
        await services.store.audit(action="sglang.budget", user=command.get("user_id", ""), channel=channel,
                                   target=target.label, model=request.model_path, verdict=planned.budget.verdict.value)
