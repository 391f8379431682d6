"""Slack listeners for `/sglang`: budget, launch, stop, history."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot import views
from bot.app import Services
from bot.attempt_log import read_attempt_log
from bot.budget import flag_refusals, naming_holders, plan_budget
from bot.chart import budget_png
from bot.core.attempts import Attempt, is_attempt_id
from bot.core.commands import (
    SglangBudgetRequest,
    SglangHelpRequest,
    SglangHistoryRequest,
    SglangLaunchRequest,
    SglangLogRequest,
    SglangStopRequest,
    SglangTriageRequest,
    parse_sglang_command,
)
from bot.core.flags import redacted
from bot.core.inventory import Target, resolve_container
from bot.core.startup_log import Progress, observed_of
from bot.errors import GpuopsError, TargetError
from bot.incidents import container_changed, triage_answered
from bot.launch import (
    HISTORY_FOR_WEIGHTS,
    LaunchRequest,
    attempt_to_stop,
    follow,
    launch_command,
    launch_title,
    next_launches,
    preflight,
    record_refused,
    remedy_launches,
    request_key,
    start,
)
from bot.slack import UNREACHABLE_ERRORS, post_messages, slack_error, upload_png
from bot.status import launch_refs_if_read
from bot.triage import TriageReport, find_attempt, read_stacks, record_triage, triage_attempt
from handlers.common import authorize

log = logging.getLogger(__name__)


def container_target(services: Services, spec: str, attempts_too: bool = False) -> Target:
    """The one container ``spec`` names (``attempts_too``: the command also takes an attempt id, so an
    unknown name says that too)."""
    or_attempt = " or an attempt id like `a20261203-140241-38e9` (`/sglang history` lists them)" if attempts_too \
        else ""
    try:
        return resolve_container(spec, services.inventory)
    except TargetError as exc:
        raise TargetError(exc.user_message + or_attempt) from None


def register(app: AsyncApp, services: Services) -> None:
    @app.command("/sglang")
    async def sglang_command(ack: Any, command: dict[str, Any], client: Any, respond: Any) -> None:
        user, channel = command.get("user_id", ""), command["channel_id"]
        try:
            request = parse_sglang_command(command.get("text", ""), services.inventory.profiles)
            if isinstance(request, SglangHelpRequest):
                await ack(views.sglang_help_text(services.inventory))
                return
            if isinstance(request, SglangHistoryRequest | SglangTriageRequest | SglangLogRequest):
                spec = request.target
                target = container_target(services, spec, not isinstance(request, SglangHistoryRequest)) \
                    if spec and not is_attempt_id(spec) else None
            elif isinstance(request, SglangStopRequest):
                target = None if is_attempt_id(request.target) else container_target(services, request.target, True)
            else:
                target = container_target(services, request.target)
        except GpuopsError as exc:
            await ack(f":warning: {exc.user_message}")
            return
        action = {SglangBudgetRequest: "sglang.budget", SglangLaunchRequest: "sglang.launch",
                  SglangStopRequest: "sglang.stop", SglangHistoryRequest: "sglang.history",
                  SglangTriageRequest: "sglang.triage", SglangLogRequest: "sglang.log"}[type(request)]
        if isinstance(request, SglangLaunchRequest) and request.force:
            action = "sglang.launch.force"
        await ack({"sglang.budget": "planning the memory budget", "sglang.launch": "running the pre-flight",
                   "sglang.launch.force": "running the pre-flight", "sglang.stop": "looking up the attempt",
                   "sglang.history": "reading the history", "sglang.triage": "reading the attempt's own log",
                   "sglang.log": "reading the attempt's own log"}[action]
                  + (f" on {target.label}…" if target else "…"))
        decision = await authorize(services, client, action, user, channel)
        if not decision.allowed:
            await respond(text=f":no_entry: {decision.reason}", response_type="ephemeral")
            return
        try:
            if isinstance(request, SglangBudgetRequest):
                assert target is not None
                await budget(services, client, respond, target, request, user, channel)
            elif isinstance(request, SglangLaunchRequest):
                assert target is not None
                launch = LaunchRequest(target, request.model_path, request.flags, user, channel, request.force)
                await run_launch(services, client, respond, launch)
            elif isinstance(request, SglangStopRequest):
                await ask_stop(services, client, respond, request.target, target, user, channel)
            elif isinstance(request, SglangTriageRequest):
                await triage(services, client, respond, request.target, target, user, channel)
            elif isinstance(request, SglangLogRequest):
                await show_log(services, client, respond, request.target, target, request.lines, channel)
            else:
                await history(services, client, respond, target, channel)
        except GpuopsError as exc:
            await respond(text=f":warning: {exc.user_message}", response_type="ephemeral")


async def budget(services: Services, client: Any, respond: Any, target: Target, request: SglangBudgetRequest,
                 user: str, channel: str) -> None:
    assert target.vmid is not None
    history = await services.attempts.recent(target.node, target.vmid, count=HISTORY_FOR_WEIGHTS)
    planned = await plan_budget(services.transport, services.inventory, target, request.model_path, request.flags,
                                history)
    planned = await naming_holders(services.transport, services.inventory, services.attempts, target, planned,
                                   services.limits.orphaned_memory_mib)
    refused = await flag_refusals(services.transport, services.attempts, services.inventory, target, planned,
                                  request.flags)
    posted = await post_messages(client, channel, views.budget_messages(planned.budget, planned.title, refused),
                                 respond=respond, pace=services.pace)
    png = budget_png(planned.budget, list(planned.gpu_totals_gib), planned.title)
    if not posted:  # answered through the response_url (the bot not in the channel, Slack refusing the post)
        missing = "Slack would not post the answer in this channel, so it came privately, where a file cannot go " \
                  "(if the bot is not in the channel: `/invite @gpuops`)"
    else:
        try:
            await upload_png(client, channel, posted[0], png, "budget.png", planned.title)
            missing = ""
        except Exception as exc:  # the explanation went out; only its picture is missing
            error = slack_error(exc)
            log.warning("attaching the budget chart in %s failed (%s)", channel, error or type(exc).__name__)
            missing = (f"Slack refused the upload (`{error}`)" if error else "Slack could not be reached") + \
                (": the app needs the `files:write` scope" if error == "missing_scope" else "")
    await services.store.audit(action="sglang.budget", user=user, channel=channel, target=target.label,
                               model=request.model_path, verdict=planned.budget.verdict.value)
    if missing:
        await respond(text=f":information_source: the budget's chart is not attached: {missing}",
                      response_type="ephemeral", replace_original=False)


async def run_launch(services: Services, client: Any, respond: Any, request: LaunchRequest) -> Attempt | None:
    """Pre-flight; then either a refusal with remedy buttons, or a launch followed in one message.

    The same request arriving again while the first is still being handled (a double click, a
    resent command) is ignored; once the first has been answered, the same command runs again."""
    key = "launch:" + request_key(request)
    if not await services.store.once(key, ttl_s=120):
        await respond(text=":information_source: the same launch is being handled already; ignoring the repeat",
                      response_type="ephemeral")
        return None
    try:
        return await _run_launch(services, client, respond, request)
    finally:
        await services.store.forget(key)


async def _run_launch(services: Services, client: Any, respond: Any, request: LaunchRequest) -> Attempt | None:
    attempts = services.attempts
    pre = await preflight(services.transport, services.inventory, attempts, request, services.limits, services.launch)
    title, command = launch_title(request), launch_command(services.inventory, pre)
    budget = pre.planned.budget if pre.planned else None
    if pre.blocked and not request.force:
        refused = await record_refused(attempts, services.inventory, pre, time.time())
        choices = await _launch_choices(services, request, next_launches(pre))
        message = views.preflight_message(title, pre.checks, pre.remedy_budget, True, False,
                                          choices, command)
        await post_messages(client, request.channel, [message], respond=respond, pace=services.pace)
        await services.store.audit(action="sglang.launch", user=request.user, channel=request.channel,
                                   target=request.target.label, attempt=refused.id, result="refused by pre-flight")
        await container_changed(services, client, refused.node, refused.vmid)
        return refused
    attempt = await start(services.transport, services.inventory, attempts, pre, services.launch, time.time())
    check_message = views.preflight_message(title, pre.checks, budget, pre.blocked, request.force and pre.blocked,
                                            command=command)
    posted = await post_messages(client, request.channel, [check_message, views.progress_message(attempt, Progress())],
                                 respond=respond, pace=services.pace)
    if len(posted) == 2:
        card = posted[1]

        def on_card(current: Attempt) -> Attempt:
            return replace(current, message_ts=card, thread_ts=card)

        # the record as it is now (a terminal may already have stopped it)
        attempt = await attempts.change(attempt.id, on_card) or on_card(attempt)
    await services.store.audit(action="sglang.launch", user=request.user, channel=request.channel,
                               target=request.target.label, attempt=attempt.id, argv=list(redacted(attempt.argv)),
                               forced=str(attempt.forced), result=f"started PID {attempt.pid}")
    services.spawn(track(services, client, attempt))
    return attempt


async def _launch_choices(services: Services, request: LaunchRequest,
                         launches: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[str, str]]:
    """One button per changed launch (the change, its flags); each waits in Redis for a click."""
    return [(f"launch with {change}", await _pending_launch(services, request, flags)) for change, flags in launches]


async def _pending_launch(services: Services, request: LaunchRequest, flags: Sequence[str]) -> str:
    """A changed launch waiting in Redis for its button's click (it then goes through the pre-flight)."""
    pending = secrets.token_hex(8)
    await services.attempts.put_pending(pending, {
        "action": "launch", "user": request.user, "channel": request.channel, "node": request.target.node,
        "vmid": request.target.vmid, "name": request.target.name, "model_path": request.model_path,
        "flags": list(flags), "created": time.time(),
    }, services.settings.confirm_ttl_s)
    return pending


async def track(services: Services, client: Any, attempt: Attempt) -> Attempt:
    """Follow an attempt and keep its channel message current (throttled edits; details in the thread)."""
    last_edit = 0.0

    async def notify(current: Attempt, progress: Progress, final: bool) -> None:
        nonlocal last_edit
        stored = await services.attempts.get(current.id) or current
        if not stored.message_ts:
            return
        now = time.monotonic()
        if not final and now - last_edit < services.settings.progress_update_s:
            return
        last_edit = now
        message = views.progress_message(stored, progress)
        try:
            await client.chat_update(channel=stored.channel, ts=stored.message_ts, text=message.text,
                                     blocks=message.blocks)
        except Exception as exc:
            # an edit Slack would not take now costs neither the following nor the result: the next stage edits
            # the card again, and the last is drawn again from the record on the next pass over the container
            error = slack_error(exc)
            log.warning("editing the launch card of %s failed (%s)", stored.id, error or type(exc).__name__)
            if final and error not in UNREACHABLE_ERRORS:
                await services.attempts.redraw_card_later(stored)
        if final:
            detail = [f"Attempt `{stored.id}` {stored.status.value}: "
                      f"{views.escape_keeping_mentions(stored.transitions[-1].note if stored.transitions else '')}"]
            readings = observed_of(progress)  # the log's, not what the pre-flight or a triage recorded
            for key, value in ((k, v) for k, v in stored.observed.items() if k in readings):
                predicted = stored.predicted.get(key)
                detail.append(f"• {key}: observed {value}" + (f", predicted {predicted}" if predicted is not None
                                                               else ""))
            if stored.left_running:
                detail.append(views.left_running_line(stored))
            # given up on as hung or too slow, its server still running: where each of its processes waits
            if stored.given_up_at is not None and (stacks := await read_stacks(
                    services.transport, services.inventory, stored)):
                detail.append(views.stacks_text(stacks))
            try:
                await client.chat_postMessage(channel=stored.channel, thread_ts=stored.thread_ts or stored.message_ts,
                                              text="\n".join(detail))
            except Exception:  # the history and the thread's summary say it too
                log.exception("saying how attempt %s ended in its thread failed", stored.id)
            if not await container_changed(services, client, stored.node, stored.vmid):
                await services.attempts.mark_changed(stored.node, stored.vmid)  # the scheduler tries again

    try:
        return await follow(services.transport, services.inventory, services.attempts, attempt, notify,
                            services.launch, services.replica, services.stopping)
    except GpuopsError as exc:
        # the node or Redis did not answer (a dropped SSH connection, a Redis restart): the launch runs on, and the
        # scheduler's next tick, on this replica or another, follows it again from its log once its lease is gone
        log.warning("following attempt %s stopped: %s; the scheduler's next tick follows it again", attempt.id,
                    exc.user_message)
        return attempt


async def resume_tracking(services: Services, client: Any) -> int:
    """After a restart: follow again the attempts whose process still lives; the others are orphaned."""
    from bot.launch import reconcile

    resumed = await reconcile(services.transport, services.inventory, services.attempts)
    for attempt in resumed:
        services.spawn(track(services, client, attempt))
    return len(resumed)


async def ask_stop(services: Services, client: Any, respond: Any, spec: str, target: Target | None, user: str,
                   channel: str) -> None:
    attempt = await attempt_to_stop(services.attempts, spec, target, "/sglang history")
    pending = secrets.token_hex(8)
    await services.attempts.put_pending(pending, {"action": "stop", "attempt": attempt.id, "user": user,
                                                  "channel": channel, "created": time.time()},
                                        services.settings.confirm_ttl_s)
    message = views.confirm_message(views.stop_question(attempt),
                                    views.stop_plan_lines(attempt, services.launch.stop_timeout_s), pending,
                                    services.settings.confirm_ttl_s)
    await post_messages(client, channel, [message], respond=respond, pace=services.pace)


async def history(services: Services, client: Any, respond: Any, target: Target | None, channel: str) -> None:
    attempts = services.attempts
    if target is not None:
        assert target.vmid is not None
        found = await attempts.recent(target.node, target.vmid, 15)
        where = target.label
    else:
        found = await attempts.recent(count=15)
        where = "all containers"
    await post_messages(client, channel, [views.history_message(found, where)], respond=respond, pace=services.pace)


async def show_log(services: Services, client: Any, respond: Any, spec: str | None, target: Target | None,
                   lines: int, channel: str) -> None:
    await post_messages(client, channel, await log_tail(services, spec, target, lines, channel), respond=respond,
                        pace=services.pace)


async def log_tail(services: Services, spec: str | None, target: Target | None, lines: int,
                   channel: str) -> list[views.SlackMessage]:
    """The last lines of the attempt's own log, as messages (for a channel, or an incident's thread)."""
    attempt = await find_attempt(services.attempts, spec, target, channel)
    log = await read_attempt_log(services.transport, attempt, lines)
    return views.attempt_log_messages(log, time.time())


async def triage(services: Services, client: Any, respond: Any, spec: str | None, target: Target | None, user: str,
                 channel: str) -> None:
    """`/sglang triage`, answered in the attempt's thread; an incident there takes its reading and first cause
    whatever Slack does with the answer."""
    report, message = await triaged(services, spec, target, user, channel)
    try:
        await post_messages(client, channel, [message], respond=respond, thread_ts=report.attempt.thread_ts,
                            pace=services.pace)
    finally:
        await triage_answered(services, client, report, time.time())


async def triaged(services: Services, spec: str | None, target: Target | None, user: str,
                  channel: str) -> tuple[TriageReport, views.SlackMessage]:
    """The triage of an attempt, its label recorded, and the answer to show (with its remedy buttons): what the log
    says is the attempt's whatever Slack then does with the answer."""
    attempts = services.attempts
    attempt = await find_attempt(attempts, spec, target, channel)
    report = await triage_attempt(services.transport, services.inventory, attempt,
                                  lambda: attempts.recent(attempt.node, attempt.vmid, 20),
                                  services.launch.stall_timeout_s, lambda: launch_refs_if_read(attempts))
    choices: list[tuple[str, str]] = []
    request = LaunchRequest(Target("container", attempt.node, attempt.vmid, attempt.container), attempt.model_path,
                            report.relaunch, user, channel)
    if report.planned is not None:
        choices = await _launch_choices(services, request, remedy_launches(report.planned.budget, request.flags))
    for experiment in report.experiments:
        choices.append((f"launch with {experiment.change}", await _pending_launch(services, request, experiment.argv)))
    await record_triage(attempts, services.store, report, user, channel)
    return report, views.triage_message(report, choices)
