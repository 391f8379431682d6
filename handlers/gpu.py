"""Slack listeners for `/gpu`: ack -> parse -> use case -> view -> post."""

from __future__ import annotations

import secrets
import time
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.core.attempts import Attempt
from bot.core.commands import GpuFreeRequest, GpuHealthRequest, GpuHelpRequest, parse_gpu_command
from bot.core.inventory import Target, resolve_targets
from bot.core.report import launch_key
from bot.errors import GpuopsError, StoreError
from bot.launch import gpu_holders
from bot.slack import post_messages
from bot.status import launch_ref, read_status, report_record, running_launches, with_launches
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
                                 time.time())
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
        holders, host = await gpu_holders(services.transport, services.inventory, target)
    except GpuopsError as exc:
        await respond(text=f":warning: {exc.user_message}", response_type="ephemeral")
        return
    # a recorded launch's processes are left to /sglang stop: it ends the whole group and records it, where
    # killing them here would leave a broken server and a history that says it failed while serving
    try:
        launches = await running_launches(services.attempts)
    except GpuopsError as exc:
        await respond(text=f":warning: cannot tell recorded launches apart ({exc.user_message}): nothing listed",
                      response_type="ephemeral")
        return
    owned: dict[str, Attempt] = {}
    loose = []
    for h in holders:
        key = launch_key(target.node, h.vmid, h.group)
        launch = None if key is None else launches.get(key)
        if launch is None:
            loose.append(h)
        else:
            owned[launch.id] = launch
    holders = loose
    by_launch = [f"{launch_ref(a).label} on {a.target_label} holds GPU memory: `/sglang stop {a.id}` stops its whole "
                 "process group and records it (not listed here)" for a in owned.values()]
    pids = sorted({h.pid for h in holders if h.pid is not None})
    orphaned = [f"GPU {g.index}: {g.memory_used_mib} MiB held with no process listed (a PID-less leak: "
                "only a driver reset or reboot frees it)" for g in host.gpus
                if not host.processes_of(g) and (g.memory_used_mib or 0) >= services.limits.orphaned_memory_mib]
    if not pids:
        text = (f"Only recorded launches hold GPU memory on {target.label}." if by_launch
                else f"No process holds GPU memory on {target.label}.")
        if by_launch or orphaned:
            text += "\n" + "\n".join(by_launch + orphaned)
        await post_messages(client, channel, [views.note_message(text)], respond=respond, pace=services.pace)
        return
    pending = secrets.token_hex(8)
    await services.attempts.put_pending(pending, {"action": "free", "node": target.node, "pids": pids, "user": user,
                                                  "channel": channel, "created": time.time()},
                                        services.settings.confirm_ttl_s)
    lines = [f"PID {h.pid} on GPU {h.gpu_index} ({f'CT {h.vmid}' if h.vmid else 'host'}): {h.name}, "
             f"{h.used_mib} MiB" for h in holders] + by_launch + orphaned
    message = views.confirm_message(f"Stop these {len(pids)} process(es) on {target.node}?", lines, pending,
                                    services.settings.confirm_ttl_s)
    await post_messages(client, channel, [message], respond=respond, pace=services.pace)
