"""Rendering: Jinja fragments hold the words, Python owns the block structure.

Block Kit is built with slack_sdk's models, whose ``to_dict()`` enforces Slack's limits;
long monospace tables are split across sections (3000 characters each) and messages
(50 blocks each), so 8 GPUs with 20 processes each still fit.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot.attempt_log import AttemptLog
from bot.core.argv import LOG_TAIL_MAX_LINES
from bot.core.attempts import SERVER_ENDED, WATCHED_UNTIL, Attempt, AttemptStatus, Check, Transition
from bot.core.budget import Budget, planned_format_conflict
from bot.core.commands import DEFAULT_LOG_LINES
from bot.core.diagnosis import HOST_OOM_KILL, Finding
from bot.core.gpu import GpuProcess
from bot.core.health import HealthReport
from bot.core.incident import RECORD_TEXT_MAX, Event, Hypothesis, Incident, Observation, Recorded, person, timeline
from bot.core.installed_flags import near_miss_notes
from bot.core.inventory import Inventory
from bot.core.report import TargetView, age_text, target_view
from bot.core.startup_log import STAGE_LABEL, Progress, Stage
from bot.launch import FreePlan, FreeResult, StopResult
from bot.status import StatusReport, launch_ref
from bot.triage import TriageReport

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SECTION_LIMIT = 3000
BLOCKS_PER_MESSAGE = 50
# Slack refuses a message whose blocks are too long together (msg_blocks_too_long) well below 50 full sections;
# a long answer (a log's last lines) goes out in messages of at most this much text each
MESSAGE_TEXT_LIMIT = 12_000
STATE_ICON = {
    "ok": ":large_green_circle:",
    "attention": ":large_yellow_circle:",
    "unreachable": ":red_circle:",
    "smi-error": ":red_circle:",
    "unreadable": ":warning:",
    "stopped": ":white_circle:",  # a container the node says is not running: nothing there to read, nothing wrong
    "no-container": ":warning:",
}

_env = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    undefined=StrictUndefined,
    keep_trailing_newline=False,
    autoescape=False,  # noqa: S701 - output is Slack mrkdwn / terminal text, not HTML
)


def render(template: str, **values: Any) -> str:
    return _env.get_template(template).render(**values).strip()


@dataclass(frozen=True)
class SlackMessage:
    text: str  # notification / accessibility fallback
    blocks: list[dict[str, Any]]

    def digest(self) -> str:
        """What the message says, in 16 hex digits: a message edited in place is sent again only when it changed."""
        return hashlib.sha256(json.dumps([self.text, self.blocks], sort_keys=True).encode()).hexdigest()[:16]


def escape_mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def monospace_sections(lines: Sequence[str], limit: int = SECTION_LIMIT) -> list[Block]:
    """Lines in ``` fences, split so that no section exceeds Slack's 3000 characters."""
    blocks: list[Block] = []
    chunk: list[str] = []
    size = 8  # the two fences and newlines
    for line in lines:
        line = escape_mrkdwn(line)[: limit - 10]
        if chunk and size + len(line) + 1 > limit:
            blocks.append(SectionBlock(text=MarkdownTextObject(text="```" + "\n".join(chunk) + "```")))
            chunk, size = [], 8
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        blocks.append(SectionBlock(text=MarkdownTextObject(text="```" + "\n".join(chunk) + "```")))
    return blocks


def paged(blocks: Sequence[Block]) -> list[list[dict[str, Any]]]:
    """Blocks in as many messages as Slack takes: at most 50 blocks and MESSAGE_TEXT_LIMIT of text each."""
    pages: list[list[dict[str, Any]]] = [[]]
    size = 0
    for block in blocks:
        as_dict = block.to_dict()  # raises SlackObjectFormationError past a block's own limits
        length = _text_chars(as_dict)
        if pages[-1] and (len(pages[-1]) == BLOCKS_PER_MESSAGE or size + length > MESSAGE_TEXT_LIMIT):
            pages.append([])
            size = 0
        pages[-1].append(as_dict)
        size += length
    return pages


def _text_chars(block: dict[str, Any]) -> int:
    texts = [block.get("text") or {}, *(block.get("fields") or []), *(block.get("elements") or [])]
    return sum(len(t.get("text", "")) if isinstance(t.get("text"), str) else 0 for t in texts if isinstance(t, dict))


def target_blocks(view: TargetView) -> list[Block]:
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(
        text=render("gpu_status_target.mrkdwn.j2", icon=STATE_ICON[view.state], view=view)[:SECTION_LIMIT]))]
    if view.detail_lines:
        blocks += monospace_sections(view.detail_lines)
    if view.gpu_lines:
        blocks += monospace_sections(view.gpu_lines)
    if view.flag_lines:
        text = "\n".join(f":warning: {escape_mrkdwn(f)}" for f in view.flag_lines)
        blocks += [SectionBlock(text=MarkdownTextObject(text=part)) for part in _split_text(text)]
    if view.process_title:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=escape_mrkdwn(view.process_title))]))
    if view.process_lines:
        blocks += monospace_sections(view.process_lines)
    return blocks


def _split_text(text: str, limit: int = SECTION_LIMIT) -> Iterable[str]:
    lines, part = text.splitlines(), ""
    for line in lines:
        if part and len(part) + len(line) + 1 > limit:
            yield part
            part = ""
        part = f"{part}\n{line}" if part else line[:limit]
    if part:
        yield part


def status_summary(report: StatusReport) -> str:
    views = [target_view(s) for s in report.statuses]
    counts: dict[str, int] = {}
    for v in views:
        counts[v.state] = counts.get(v.state, 0) + 1
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    text = f"GPU status: {len(views)} target{'s' if len(views) != 1 else ''} ({parts}) in {report.elapsed_s:.1f}s"
    if report.launches_unread:
        text += f"; processes not matched to recorded launches: {report.launches_unread}"
    return text


def status_messages(report: StatusReport) -> list[SlackMessage]:
    """One message, or several when Slack's limits require it."""
    blocks: list[Block] = []
    for i, status in enumerate(report.statuses):
        if i:
            blocks.append(DividerBlock())
        blocks += target_blocks(target_view(status, report.launches))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=status_summary(report))]))
    pages = paged(blocks)
    summary = status_summary(report)
    return [
        SlackMessage(summary if n == 0 else f"{summary} (part {n + 1}/{len(pages)})", page)
        for n, page in enumerate(pages)
    ]


def status_text(report: StatusReport) -> str:
    """The terminal rendering of the same answer."""
    return render("gpu_status.txt.j2", views=[target_view(s, report.launches) for s in report.statuses],
                  footer=status_summary(report))


def help_text(inventory: Inventory) -> str:
    return render(
        "gpu_help.mrkdwn.j2",
        node_count=len(inventory.nodes),
        example_node=next(iter(inventory.nodes), "pve5"),
        example_container=next(iter(inventory.containers), None),
    )


def sglang_help_text(inventory: Inventory) -> str:
    return render("sglang_help.mrkdwn.j2", containers=sorted(inventory.containers),
                  profiles=sorted(inventory.profiles.items()), log_lines=DEFAULT_LOG_LINES, log_max=LOG_TAIL_MAX_LINES)


def usage_text(problem: str, inventory: Inventory) -> str:
    return f":warning: {problem}\n\n{help_text(inventory)}"


def blocks_to_text(blocks: Sequence[dict[str, Any]]) -> str:
    """What a person would read in Slack, as plain text (console and transcripts)."""
    out: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "divider":
            out.append("-" * 60)
        elif kind in ("section", "header"):
            out.append(_plain(block.get("text", {}).get("text", "")))
            for f in block.get("fields", []) or []:
                out.append(_plain(f.get("text", "")))
        elif kind == "context":
            out.append("  ".join(_plain(e.get("text", "")) for e in block.get("elements", [])))
        elif kind == "actions":
            out.append("  ".join(f"[{_plain(e.get('text', {}).get('text', ''))}]" for e in block.get("elements", [])))
    return "\n".join(out)


def _plain(text: str) -> str:
    text = text.replace("```", "")
    for icon, word in (
        (":large_green_circle:", "[ok]"), (":large_yellow_circle:", "[!]"), (":red_circle:", "[X]"),
        (":warning:", "[!]"), (":white_circle:", "[-]"),
    ):
        text = text.replace(icon, word)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# ----------------------------------------------------------------------------- budgets

VERDICT_WORD = {"fits": "FITS", "fails": "WILL FAIL", "degraded": "STARTS, DEGRADED"}
VERDICT_ICON = {"fits": ":large_green_circle:", "fails": ":red_circle:", "degraded": ":large_yellow_circle:"}


def _error_lead(budget: Budget) -> str:
    """How the failure is introduced: SGLang's own line is quoted as such, gpuops' account of it never is."""
    return "SGLang would print" if budget.error_verbatim else "SGLang would fail (gpuops' words, not its message)"


def budget_text(budget: Budget, title: str, refused_flags: Sequence[str] | None = None) -> str:
    """``refused_flags``: what the container's SGLang would refuse of the command line (None: its flags were not
    read, so a pass-through flag a typo away from one the budget reads is noted instead)."""
    return render("budget.txt.j2", b=budget, title=title, verdict_word=VERDICT_WORD[budget.verdict.value],
                  error_lead=_error_lead(budget), refused_flags=refused_flags or (),
                  near_misses=_near_misses(budget, refused_flags))


def _near_misses(budget: Budget, refused_flags: Sequence[str] | None) -> tuple[str, ...]:
    """Notes on pass-through flags a typo away from ones the budget reads, when the installed SGLang's own flags
    were not read (when they were, its refusals say more)."""
    return near_miss_notes(budget.not_modelled) if refused_flags is None else ()


def budget_messages(budget: Budget, title: str, refused_flags: Sequence[str] | None = None) -> list[SlackMessage]:
    """The explanation as Block Kit: summary, the per-GPU table, the verdict, the remedies (``refused_flags`` as in
    ``budget_text``)."""
    word = VERDICT_WORD[budget.verdict.value]
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=render(
        "budget_summary.mrkdwn.j2", icon=VERDICT_ICON[budget.verdict.value], title=escape_mrkdwn(title), b=budget,
        verdict_word=word)))]
    table = []
    for line in budget.lines:
        amount = f"{line.gib:9.2f} GiB" if line.gib is not None else " " * 13
        value = f"  [{line.value}]" if line.value else ""
        table.append(f"{line.label[:34]:<34} {amount}{value}")
        table.append(f"    {line.why}")
    blocks += monospace_sections(table)
    verdict_lines = []
    if budget.error_text:
        verdict_lines.append(f":x: {_error_lead(budget)}: {code_span(budget.error_text)}")
    verdict_lines += [f":x: SGLang's parser would refuse the launch: {escape_mrkdwn(r)}" for r in refused_flags or ()]
    verdict_lines += [f":warning: {escape_mrkdwn(r)}" for r in budget.reasons]
    for part in _split_text("\n".join(verdict_lines)):
        blocks.append(SectionBlock(text=MarkdownTextObject(text=part)))
    if budget.remedies:
        blocks += _remedy_sections(budget)
    if budget.not_modelled:
        near = "".join(f"\n:warning: {note}" for note in _near_misses(budget, refused_flags))
        blocks.append(ContextBlock(elements=[MarkdownTextObject(
            text=escape_mrkdwn("Not modelled (passed through): " + " ".join(budget.not_modelled) + near)[:2900])]))
    if budget.model_notes:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(
            text="Note: " + escape_mrkdwn("; ".join(budget.model_notes))[:2900])]))
    return [SlackMessage(f"{title}: {word}", page) for page in paged(blocks)]


# ----------------------------------------------------------------------------- launches

CHECK_ICON = {"ok": ":white_check_mark:", "warn": ":warning:", "fail": ":x:"}
STATUS_ICON = {
    "planned": ":clipboard:", "launching": ":hourglass_flowing_sand:", "ready": ":large_green_circle:",
    "failed": ":red_circle:", "stopped": ":black_square_for_stop:", "orphaned": ":ghost:",
}


BACKTICK_LOOKALIKE = "\u02cb"  # modifier letter grave accent


def numbered_changes(changes: Iterable[tuple[str, str]]) -> list[str]:
    """Remedies or experiments as a numbered list: each change as code, then what it does."""
    return [f"{i}. {code_span(change)} — {escape_mrkdwn(why)}" for i, (change, why) in enumerate(changes, 1)]


def _remedy_sections(budget: Budget) -> list[Block]:
    """A budget's remedies, cheapest first, as sections within Slack's limit (the budget's answer, a refusal)."""
    text = "*Remedies, cheapest first:*\n" + "\n".join(numbered_changes((r.change, r.effect) for r in budget.remedies))
    return [SectionBlock(text=MarkdownTextObject(text=part)) for part in _split_text(text)]


def code_span(text: str) -> str:
    """``text`` as inline code; a backtick inside would end the span early (a log line, or gpuops' own words that
    quote a command), so it is shown as its look-alike."""
    return "`" + escape_mrkdwn(text.replace("`", BACKTICK_LOOKALIKE)) + "`"


def preflight_blocks(title: str, checks: Sequence[Check], refused: bool, forced: bool,
                     command: str | None = None) -> list[Block]:
    """``command``: the server's command line as it would run (``launch.launch_command``)."""
    head = (":no_entry: *Pre-flight refused the launch*" if refused and not forced else
            ":warning: *Pre-flight failed; launching anyway (--force)*" if forced else
            ":white_check_mark: *Pre-flight passed*")
    lines = [f"{head} — {escape_mrkdwn(title)}"]
    if command:  # as code; a backtick inside would end it, so it is shown as its look-alike
        lines.append(code_span(command))
    lines += [f"{CHECK_ICON[c.result]} *{escape_mrkdwn(c.name)}*: {escape_mrkdwn(c.detail)}" for c in checks]
    return [SectionBlock(text=MarkdownTextObject(text=part)) for part in _split_text("\n".join(lines))]


BUTTON_TEXT_LIMIT = 75  # Slack's limit for a button's text


def button_text(label: str) -> str:
    """A button's text within Slack's limit; a longer label is cut with an ellipsis, so a cut never reads as a whole
    (the message above the buttons lists each change in full)."""
    return label if len(label) <= BUTTON_TEXT_LIMIT else label[:BUTTON_TEXT_LIMIT - 1] + "…"


def remedy_buttons(choices: Sequence[tuple[str, str]]) -> list[Block]:
    """(label, value) pairs -> an actions block; each click starts the changed launch's pre-flight."""
    if not choices:
        return []
    buttons = [ButtonElement(text=PlainTextObject(text=button_text(label)), action_id=f"gpuops_remedy_{i}",
                             value=value)
               for i, (label, value) in enumerate(choices[:5])]
    return [SectionBlock(text=MarkdownTextObject(text="*Try next* (each button runs the pre-flight first):")),
            ActionsBlock(elements=buttons)]


def preflight_message(title: str, checks: Sequence[Check], budget: Budget | None, refused: bool, forced: bool,
                      choices: Sequence[tuple[str, str]] = (), command: str | None = None) -> SlackMessage:
    blocks = preflight_blocks(title, checks, refused, forced, command)
    if budget is not None and budget.remedies and refused:
        blocks += _remedy_sections(budget)
    blocks += remedy_buttons(choices)
    word = "refused" if refused and not forced else "passed" if not refused else "failed (forced)"
    return SlackMessage(f"Pre-flight {word}: {title}", [b.to_dict() for b in blocks])


def progress_message(attempt: Attempt, progress: Progress) -> SlackMessage:
    status = attempt.status.value
    stages = [s for s in Stage if s is not Stage.STARTING]
    marks = []
    for stage in stages:
        if progress.stage >= stage:
            marks.append(f":white_check_mark: {STAGE_LABEL[stage]}")
        elif stage == progress.stage + 1 and status == "launching":
            marks.append(f":hourglass_flowing_sand: {STAGE_LABEL[stage]}")
            break
    predicted = attempt.predicted
    facts = []
    if progress.weights_gib is not None:
        loaded_as = (progress.weights_format or "").removeprefix("quant=")
        facts.append(f"weights {progress.weights_gib:.2f} GiB/GPU observed"
                     + (f" (loaded as {loaded_as})" if progress.weights_format and progress.weights_format.startswith(
                         "quant=") else "")
                     + (f" vs {predicted['weights_gib']} predicted" if predicted.get("weights_gib") else ""))
    if progress.kv_tokens is not None:
        facts.append(f"KV pool {progress.kv_tokens:,} tokens observed"
                     + (f" vs {predicted['kv_tokens']:,} predicted" if predicted.get("kv_tokens") else ""))
    if progress.max_running_requests is not None:
        facts.append(f"max_running_requests {progress.max_running_requests}")
    head = (f"{STATUS_ICON[status]} *Launch `{attempt.id}`* on {escape_mrkdwn(attempt.target_label)} — "
            f"*{status}*" + ("" if status != "launching" else f": {progress.label}"))
    lines = [head, "  ".join(marks)]
    if facts:
        lines.append(" · ".join(facts))
    other = planned_format_conflict(progress.weights_format, predicted.get("weights_format"))
    if other:
        lines.append(f":warning: not the weights the pre-flight sized ({other}): the predicted figures do not "
                     "apply; check that the config.json under --model-path describes the checkpoint loaded")
    if attempt.error_line:
        lines.append(f":x: first error: {code_span(attempt.error_line[:400])}")
        if attempt.observed.get(SERVER_ENDED):
            lines.append(server_ended_line(attempt))
        if attempt.left_running:
            lines.append(left_running_line(attempt))
        lines.append("Run `/sglang triage " + attempt.id + "` for the cause and the next experiment.")
    if attempt.status.value in ("ready", "stopped") and attempt.transitions:  # how it is serving; who stopped it
        lines.append(escape_keeping_mentions(attempt.transitions[-1].note))
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text("\n".join(lines))]
    follow = f" · `/sglang log {attempt.id}` shows its last lines" if status == "launching" else ""
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=escape_mrkdwn(
        f"PID {attempt.pid} · log {attempt.log_path} · changes: {attempt.changes_text}")[:2800] + follow)]))
    return SlackMessage(f"Launch {attempt.id}: {status} ({progress.label})", [b.to_dict() for b in blocks])


STACKS_HEAD = "Where its processes are now (py-spy, innermost frame first):"


def stacks_text(stacks: Sequence[str]) -> str:
    """py-spy's stacks of a server's processes in a message's text, as one code block within a section's size."""
    body = "\n".join(escape_mrkdwn(line) for line in stacks)
    cut = SECTION_LIMIT - len(STACKS_HEAD) - 20
    return f"{STACKS_HEAD}\n```{body if len(body) <= cut else body[:cut] + ' …'}```"


def left_running_line(attempt: Attempt) -> str:
    """For a launch that failed while its server still ran (unhealthy after saying ready, hung, too slow): its
    server was not stopped; for one given up on that the bot still watches, until when."""
    line = (f":warning: its server (PID {attempt.pid}) was left running, holding its GPU memory: `/sglang log "
            f"{attempt.id}` shows what it says, `/sglang stop {attempt.id}` stops it")
    until = attempt.observed.get(WATCHED_UNTIL)
    if attempt.given_up_at is not None and isinstance(until, int | float):
        line += (f". gpuops reads its log on until {time.strftime('%H:%M UTC', time.gmtime(until))}: should it come "
                 "up after all, it is recorded ready")
    return line


def server_ended_line(attempt: Attempt) -> str:
    """For a launch that failed with its server left running, once that server ended: stopped, or gone."""
    ended = attempt.observed[SERVER_ENDED]
    if "exited" in ended:
        when = time.strftime("%H:%M UTC", time.gmtime(ended["at"]))
        return (f":black_square_for_stop: its server, left running, then ended on its own: "
                f"{escape_mrkdwn(ended['exited'])} (noticed {when})")
    return (f":black_square_for_stop: its server (PID {attempt.pid}), left running, was then stopped by "
            f"{_person(ended['by'])} ({escape_mrkdwn(ended['signal'])}); {escape_mrkdwn(ended['memory'])}")


def server_exited_message(attempt: Attempt, finding: Finding | None) -> SlackMessage:
    """A ready server whose process has gone, noticed by the sampler: what its own log says first."""
    lines = [f":x: *Server `{attempt.id}`* on {escape_mrkdwn(attempt.target_label)} *exited while serving*",
             escape_mrkdwn(attempt.transitions[-1].note if attempt.transitions else "")]
    evidence: list[str] = []
    if finding is None:
        lines.append("Its log could not be read now; `/sglang triage " + attempt.id + "` tries again.")
    else:
        where = "from the node's kernel log" if finding.label == HOST_OOM_KILL else "in its log"
        lines.append(f"First cause {where}: *{finding.label}* ({finding.confidence} confidence, {finding.phase}): "
                     + escape_mrkdwn(finding.explanation))
        lines += [f"_{escape_mrkdwn(n)}_" for n in finding.notes]
        evidence = [f"L{e.line_no}: {e.text}" for e in finding.evidence]
        lines.append("`/sglang triage " + attempt.id + "` adds the GPUs, versions and Xid events, and the next "
                     "experiment.")
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text("\n".join(lines))]
    if evidence:
        blocks += monospace_sections(evidence)
    return SlackMessage(f"Server {attempt.id} on {attempt.target_label} exited while serving",
                        [b.to_dict() for b in blocks])


def server_unanswering_message(attempt: Attempt, error: str, now: float) -> SlackMessage:
    """A ready server whose process lives but fails its health probe twice in a row."""
    since = time.strftime("%H:%M UTC", time.gmtime(now))
    lines = [f":warning: *Server `{attempt.id}`* on {escape_mrkdwn(attempt.target_label)} *is not answering* "
             f"(its process, PID {attempt.pid}, still runs; two health probes in a row failed, the last at {since})",
             f"Last probe: {code_span(error[:300])}",
             f"`/sglang log {attempt.id}` shows its last lines and when it last wrote; `/sglang triage {attempt.id}` "
             f"reads it whole (a hang is placed where it stopped); `/sglang stop {attempt.id}` stops it by its process "
             "group, after a confirmation."]
    return SlackMessage(f"Server {attempt.id} on {attempt.target_label} is not answering",
                        [SectionBlock(text=MarkdownTextObject(text="\n".join(lines))).to_dict()])


def server_slow_message(attempt: Attempt, seconds: float, threshold_s: float, now: float) -> SlackMessage:
    """A ready server that answers its health probe, but slower than the threshold twice in a row."""
    since = time.strftime("%H:%M UTC", time.gmtime(now))
    lines = [f":hourglass: *Server `{attempt.id}`* on {escape_mrkdwn(attempt.target_label)} *answers slowly*: "
             f"its 8-token health probe took over {threshold_s:g} s on two samples in a row "
             f"({seconds:.1f} s at {since}; an idle healthy server answers in well under a second)",
             f"`/gpu status {attempt.target_label}` shows its GPUs (utilization, memory, who holds them); "
             f"its log's `#queue-req` and `token usage` lines say whether requests are queueing "
             f"(`/sglang log {attempt.id}` shows its last lines)."]
    return SlackMessage(f"Server {attempt.id} on {attempt.target_label} answers slowly",
                        [SectionBlock(text=MarkdownTextObject(text="\n".join(lines))).to_dict()])


def _no_attempts_text(where: str) -> str:
    return f"No attempts recorded yet on {where}: a launch records one (`/sglang launch`)."


def history_message(attempts: Sequence[Attempt], where: str) -> SlackMessage:
    if not attempts:
        text = _no_attempts_text(where)
        return SlackMessage(text, [SectionBlock(text=MarkdownTextObject(text=escape_mrkdwn(text))).to_dict()])
    return SlackMessage(f"{len(attempts)} attempts on {where}", [b.to_dict() for b in _attempt_table(attempts, where)])


def _attempt_table(attempts: Sequence[Attempt], where: str) -> list[Block]:
    rows = [f"{'ATTEMPT':<22} {'WHEN (UTC)':<17} {'STATUS':<9} CHANGED -> RESULT"]
    for a in attempts:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(a.created_at))
        result = a.error_line or (a.transitions[-1].note if a.transitions else "")
        if a.observed.get("kv_tokens"):
            result = f"{a.observed['kv_tokens']:,} KV tokens; {result}"
        rows.append(f"{a.id:<22} {when:<17} {a.status.value:<9} {a.changes_text[:80]} -> {result[:90]}")
    return [SectionBlock(text=MarkdownTextObject(text=f"*Attempts on {escape_mrkdwn(where)}* (newest first)")),
            *monospace_sections(rows)]


def thread_history_messages(incident: Incident, attempts: Sequence[Attempt]) -> list[SlackMessage]:
    """`@gpuops history`: everything the thread's record holds, none of it cut: the container's attempts, then each
    hypothesis, decision, note, reading and attempt's step in the order they happened (the summary keeps the latest
    and gives way when long; this is where the rest is). As many messages as Slack's limits need."""
    where = f"{incident.node}:{incident.vmid}" if incident.node else "no container linked yet"
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(
        text=f":scroll: *History of this thread* — {escape_mrkdwn(where)}: the attempts, then every hypothesis, test "
             "and note in the order they happened"))]
    if attempts:
        blocks += _attempt_table(attempts, where)
    else:
        none = (escape_mrkdwn(_no_attempts_text(where)) if incident.node else
                "No attempts: this thread follows no container yet (`@gpuops status <container>` or `@gpuops triage "
                "<container>` links one).")
        blocks.append(SectionBlock(text=MarkdownTextObject(text=none)))
    lines = ["*Timeline* (UTC, oldest first)", *(_event_line(e) for e in timeline(incident, attempts))]
    if len(lines) == 1:
        lines.append("nothing recorded yet — `@gpuops hypothesis <text>`, `@gpuops note <text>`")
    blocks += [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text("\n".join(lines))]
    pages = paged(blocks)
    title = f"History of the thread on {where}" if incident.node else "History of this thread"
    return [SlackMessage(title + (f" (part {n}/{len(pages)})" if len(pages) > 1 else ""), page)
            for n, page in enumerate(pages, 1)]


def _event_line(event: Event) -> str:
    when = f"`{time.strftime('%m-%d %H:%M', time.gmtime(event.at))}`"
    h, o = event.hypothesis, event.observation
    if h is not None and event.kind == "raised":
        line = f"{when} :bulb: *{h.id}* raised by {_person(h.author)}: {escape_keeping_mentions(h.text)}"
        if h.status != "open" and h.decided_at is None:  # decided before decisions kept their time
            line += f" — {HYPOTHESIS_ICON[h.status]} {_decision(h)}"
        return line
    if h is not None:
        return f"{when} {HYPOTHESIS_ICON[h.status]} *{h.id}* {_decision(h)}"
    if event.attempt is not None and event.transition is not None:
        return f"{when} {_attempt_step(event.attempt, event.transition)}"
    assert o is not None
    if o.kind == "attempt":
        changed = f" — changed: {escape_mrkdwn(', '.join(o.changes))}" if o.changes else ""
        triage = f" · triage: {o.label}" if o.label else ""
        return f"{when} {STATUS_ICON.get(o.outcome or '', ':grey_question:')} attempt `{o.attempt}` " \
               f"{o.outcome}{changed}{triage}"
    icon = ":memo: note" if o.kind == "note" else ":mag:"
    return f"{when} {icon} {escape_keeping_mentions(o.text)}"


def _attempt_step(a: Attempt, step: Transition) -> str:
    """One step of an attempt in a thread's timeline: launched (by whom, what changed), then how it ended."""
    icon = STATUS_ICON[step.status.value]
    if step.status is AttemptStatus.LAUNCHING:
        return (f"{icon} attempt `{a.id}` launched by {_person(a.user)} — changed: "
                f"{escape_mrkdwn(a.changes_text)[:300]}")
    note = step.note or (a.error_line if step.status is AttemptStatus.FAILED else "")
    said = f": {escape_keeping_mentions(note[:300])}" if note else ""
    triage = f" · triage: {a.observed['triage']}" if step.status is AttemptStatus.FAILED and a.observed.get(
        "triage") else ""
    if step is next(t for t in a.transitions if t.status is not AttemptStatus.PLANNED):  # refused before it launched
        said += f" — changed: {escape_mrkdwn(a.changes_text)[:300]}"
    return f"{icon} attempt `{a.id}` {step.status.value}{said}{triage}"


def _decision(h: Hypothesis) -> str:
    tested = f" (tested by {', '.join(f'`{t}`' for t in h.tested_by)})" if h.tested_by else ""
    return f"{h.status} by {escape_keeping_mentions(h.decided_by)}: {escape_keeping_mentions(h.why)}{tested}"


def confirm_message(title: str, lines: Sequence[str], pending_id: str, ttl_s: int) -> SlackMessage:
    text = f":warning: *{escape_mrkdwn(title)}*\n" + "\n".join(f"• {escape_mrkdwn(x)}" for x in lines)
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text(text)]
    blocks.append(ActionsBlock(elements=[
        ButtonElement(text=PlainTextObject(text="Confirm"), action_id="gpuops_confirm", value=pending_id,
                      style="danger"),
        ButtonElement(text=PlainTextObject(text="Cancel"), action_id="gpuops_cancel", value=pending_id),
    ]))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(
        text=f"Needs an operator's click within {ttl_s // 60} min; nothing happens until then.")]))
    return SlackMessage(title, [b.to_dict() for b in blocks])


def stop_question(attempt: Attempt) -> str:
    return f"Stop attempt {attempt.id} on {attempt.target_label}?"


def stop_plan_lines(attempt: Attempt, stop_timeout_s: float) -> list[str]:
    """What stopping ``attempt`` will do, for the person asked to confirm it."""
    return [f"SIGTERM to process group {attempt.pid}, SIGKILL after {stop_timeout_s:g}s",
            f"then nvidia-smi checks the memory came back; status now: {attempt.status.value}"]


def stopped_text(result: StopResult) -> str:
    """What a confirmed stop did: the signal it took, and whether the GPU memory came back."""
    a = result.attempt
    return (f":black_square_for_stop: Stopped attempt `{a.id}` on {escape_mrkdwn(a.target_label)} "
            f"({result.signal_used}); {result.memory_note}")


def free_question(plan: FreePlan) -> str:
    return f"Stop these {len(plan.pids)} process(es) on {plan.target.node}?"


def _left_to_others(plan: FreePlan, stop_command: str) -> list[str]:
    """What freeing leaves alone and why: recorded launches (stopped as launches), memory held with no process (kept
    held by the processes listed that hold the GPUs open, or by nothing that can be stopped)."""
    lines = [f"{launch_ref(a).label} on {a.target_label} holds GPU memory: `{stop_command} {a.id}` stops its whole "
             "process group and records it (not listed here)" for a in plan.launches]
    lines += [f"GPU {gpu}: {mib} MiB held with no process listed" for gpu, mib in plan.orphaned]
    if plan.orphaned and plan.device_holders:
        lines.append("the processes above that hold a GPU open may keep that memory (a killed server's child keeps "
                     "what its parent left); what stays once they are stopped, only a driver reset or a reboot of the "
                     "node frees")
    elif plan.orphaned:
        lines.append(f"no process on {plan.target.label} holds a GPU open (NVIDIA's own services aside): that memory "
                     "is a leak only a driver reset or a reboot of the node frees")
    return lines


def _running_for(process: GpuProcess) -> str:
    return f", running for {age_text(process.running_s)}" if process.running_s is not None else ""


def free_plan_lines(plan: FreePlan, stop_command: str = "/sglang stop") -> list[str]:
    """Each PID a confirmation stops (with how long it has run: yesterday's leftover, or a colleague's just started),
    then what it leaves alone."""
    holding = [f"PID {h.pid} on GPU {h.gpu_index} ({h.owner}): {h.name}, {h.used_mib} MiB{_running_for(h)}"
               for h in plan.holders]
    holding_open = [f"PID {d.process.pid} ({d.process.owner}): {d.process.name}, holds {', '.join(d.devices)} open, "
                    f"with no GPU memory listed for it{_running_for(d.process)}" for d in plan.device_holders]
    return holding + holding_open + _left_to_others(plan, stop_command)


def nothing_to_free_text(plan: FreePlan, stop_command: str = "/sglang stop") -> str:
    """The answer when no process but a recorded launch's holds GPU memory on the target."""
    others = _left_to_others(plan, stop_command)
    text = (f"Only recorded launches hold GPU memory on {plan.target.label}." if plan.launches
            else f"No process holds GPU memory on {plan.target.label}.")
    return "\n".join([text, *others])


def freed_text(result: FreeResult, node: str) -> str:
    """What a confirmed free did: the PIDs it stopped, those it left (no longer holding), the memory after."""
    lines = [f":broom: Stopped PIDs {', '.join(map(str, result.killed)) or 'none'} on {node}; {result.memory_note}"]
    return "\n".join(lines + [f"• {s}" for s in result.skipped])


def note_message(text: str) -> SlackMessage:
    return SlackMessage(text[:3000], [SectionBlock(text=MarkdownTextObject(text=part)).to_dict()
                                      for part in _split_text(text)])


def triage_message(report: TriageReport, choices: Sequence[tuple[str, str]] = ()) -> SlackMessage:
    a = report.attempt
    lines: list[str]
    if report.stale:
        lines = [f":no_entry: *Not diagnosed: stale log* for attempt `{a.id}` on {escape_mrkdwn(a.target_label)}",
                 escape_mrkdwn(report.stale)]
        evidence: list[str] = []
    else:
        f = report.finding
        assert f is not None
        lines = [f":mag: *Triage of `{a.id}`* on {escape_mrkdwn(a.target_label)}: *{f.label}* "
                 f"({f.confidence} confidence, {f.phase})", escape_mrkdwn(f.explanation)]
        if f.also_seen:
            lines.append(f"Also in the log, not the cause: {', '.join(f.also_seen)}")
        lines += [f"_{escape_mrkdwn(n)}_" for n in f.notes]
        evidence = [f"L{e.line_no}: {e.text}" for e in f.evidence]
    lines.append(f"• {escape_mrkdwn(report.gpus)}")
    versions = ", ".join(f"{k} {v}" for k, v in report.versions.items() if v) or "unknown"
    lines.append(f"• versions in the container: {escape_mrkdwn(versions)}")
    lines.append(f"• {escape_mrkdwn(report.disk)}")
    if report.peer_access:
        lines.append(f"• peer access: {escape_mrkdwn(report.peer_access)}")
    lines += [f"• {escape_mrkdwn(x)}" for x in report.label_evidence]
    if report.xid:
        lines += [f"• kernel: {escape_mrkdwn(x)}" for x in report.xid]
    else:
        lines.append("• kernel: no Xid since the attempt started")
    lines += [f"• kernel: {escape_mrkdwn(x)}" for x in report.oom_kills]
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text("\n".join(lines))]
    if evidence:
        blocks += monospace_sections(evidence)
    if report.stacks:  # a server that still runs: what each of its processes is doing
        blocks.append(SectionBlock(text=MarkdownTextObject(text=STACKS_HEAD)))
        blocks += monospace_sections(report.stacks)
    if report.finding is not None:
        steps = [f"*Next experiment:* {escape_mrkdwn(report.finding.next_step)}"]
        if report.planned is not None and report.planned.budget.remedies:
            steps += numbered_changes((r.change, r.effect) for r in report.planned.budget.remedies)
        steps += numbered_changes((e.change, e.why) for e in report.experiments)
        blocks += [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text("\n".join(steps))]
    blocks += remedy_buttons(choices)
    label = report.finding.label if report.finding else "stale log"
    return SlackMessage(f"Triage of {a.id}: {label}", [b.to_dict() for b in blocks])


def attempt_log_messages(log: AttemptLog, now: float) -> list[SlackMessage]:
    """The last lines of an attempt's own log, numbered as in the file, with how long ago it was last written; in
    as many messages as keep each under MESSAGE_TEXT_LIMIT."""
    a, tail = log.attempt, log.tail
    head = f":scroll: *Log of `{a.id}`* on {escape_mrkdwn(a.target_label)} ({a.status.value})"
    if tail is None:
        text = f"{head}\n:warning: {escape_mrkdwn(log.problem or 'the log could not be read')}"
        return [SlackMessage(f"Log of {a.id}: not read",
                             [SectionBlock(text=MarkdownTextObject(text=text)).to_dict()])]
    if not tail.lines:
        where = "the log is empty"
    else:
        where = f"lines {tail.first_line:,}–{tail.total_lines:,} of {tail.total_lines:,}"
    head += f" — {where}, last written {age_text(now - tail.modified_at)} ago"
    numbered = [f"{n:>6}  {'… ' if i == 0 and tail.cut else ''}{text}"
                for i, (n, text) in enumerate(zip(range(tail.first_line, tail.total_lines + 1), tail.lines,
                                                  strict=True))]
    footer = code_span(a.log_path or "")
    if a.status.value in ("failed", "orphaned"):
        footer += f" · `/sglang triage {a.id}` reads it whole for the first cause"
    pages = paged([SectionBlock(text=MarkdownTextObject(text=head)), *monospace_sections(numbered),
                   ContextBlock(elements=[MarkdownTextObject(text=footer)])])
    return [SlackMessage(f"Log of {a.id}: {where}" + (f" (part {n}/{len(pages)})" if len(pages) > 1 else ""), page)
            for n, page in enumerate(pages, 1)]


HYPOTHESIS_ICON = {"open": ":grey_question:", "confirmed": ":white_check_mark:", "refuted": ":x:"}


SUMMARY_SHORT_TEXT = 160  # a hypothesis's words when all of them at length would not fit the one message
SUMMARY_OBSERVATIONS = 5  # the latest notes and readings the summary shows


def _repeats_together(observations: Sequence[Observation]) -> list[tuple[Observation, int]]:
    """Observations in order, each run of the same words (the same GPU reading taken by status after status, triage
    after triage) as its last one and how many it was: the summary's few lines are not spent on one reading."""
    runs: list[tuple[Observation, int]] = []
    for o in observations:
        if runs and (runs[-1][0].kind, runs[-1][0].text) == (o.kind, o.text):
            runs[-1] = (o, runs[-1][1] + 1)
        else:
            runs.append((o, 1))
    return runs


def _hhmm(at: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(at))


def incident_summary(incident: Incident, attempts: Sequence[Attempt]) -> SlackMessage:
    """The thread's one summary, edited in place. So that it stays one message Slack takes, a long incident gives way
    in this order: each hypothesis in its first words; the attempts between the first and the latest (`@gpuops
    history` lists them); then the oldest hypotheses, decided ones first (`@gpuops history` lists every one)."""
    where = f"{incident.node}:{incident.vmid}" if incident.node else "(no container linked yet)"
    head = [f":pushpin: *Incident summary* — {escape_mrkdwn(where)} (kept up to date by gpuops)", "*Attempts*"]
    tried = []
    for a in sorted(attempts, key=lambda x: x.created_at):
        result = a.error_line or (a.transitions[-1].note if a.transitions else "")
        triage = f" · triage: {a.observed['triage']}" if a.observed.get("triage") else ""
        until = a.observed.get(WATCHED_UNTIL)
        if a.given_up_at is not None and isinstance(until, int | float):  # see bot.core.incident.with_attempts
            triage += (" · given up on with its server left running: a result for the hypotheses once it comes up, "
                       f"ends, or {_hhmm(until)} passes")
        tried.append(f"{STATUS_ICON[a.status.value]} `{a.id}` {a.status.value} — changed: "
                     f"{escape_mrkdwn(a.changes_text)[:200]} — {escape_keeping_mentions(result[:200])}{triage}")
    observed = _repeats_together([o for o in incident.observations if o.kind in ("note", "status")])
    notes = observed[-SUMMARY_OBSERVATIONS:]
    earlier = len(observed) - len(notes)
    tail = ["*Observations*", *([f"… {earlier} earlier (`@gpuops history` lists them)"] if earlier else []),
            *(f"• {escape_keeping_mentions(o.text[:300])}" + (f" (×{n}, the last at {_hhmm(o.at)})" if n > 1 else "")
              for o, n in notes)] if notes else []
    hypotheses = {h.id: _hypothesis_line(h) for h in incident.hypotheses}
    room = MESSAGE_TEXT_LIMIT - 400  # 400: two elision lines, the section joins

    def size(*parts: Sequence[str]) -> int:
        return sum(len(x) + 1 for part in parts for x in part)

    if size(head, tried, list(hypotheses.values()), tail) > room:
        hypotheses = {h.id: _hypothesis_line(h, SUMMARY_SHORT_TEXT) for h in incident.hypotheses}
    kept, left_out = list(tried), 0
    while len(kept) > 2 and size(head, kept, list(hypotheses.values()), tail) > room:
        kept.pop(1)  # the first attempt says where it began; the latest say where it is
        left_out += 1
    if left_out:
        kept.insert(1, f"… {left_out} attempts in between (`@gpuops history` lists them)")
    # the oldest decided first, then the oldest still open; the latest is always shown
    giving_way = [h.id for h in incident.hypotheses if h.status != "open"] + [
        h.id for h in incident.hypotheses if h.status == "open"]
    dropped = 0
    while len(hypotheses) > 1 and size(head, kept, list(hypotheses.values()), tail) > room:
        hypotheses.pop(next(i for i in giving_way if i in hypotheses and i != incident.hypotheses[-1].id))
        dropped += 1
    shown = list(hypotheses.values()) or ["none yet — `@gpuops hypothesis <text>`"]
    if dropped:
        shown.insert(0, f"… {dropped} earlier hypotheses not shown here (`@gpuops history` lists every one)")
    lines = head + (kept or ["none yet"]) + ["*Hypotheses*", *shown] + tail
    blocks = [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text("\n".join(lines))]
    return SlackMessage("Incident summary", [b.to_dict() for b in blocks])


def _hypothesis_line(h: Hypothesis, words: int | None = None) -> str:
    """A hypothesis as the summary lists it: whole, or its first ``words`` characters (and its reason's) marked cut;
    a person mentioned in it stays a mention."""
    def cut(text: str, limit: int) -> str:
        return escape_keeping_mentions(text if len(text) <= limit else text[:limit - 1].rstrip() + "…")

    decided = (f" — {h.status} by {escape_keeping_mentions(h.decided_by)}: {cut(h.why, min(300, words or 300))}"
               if h.status != "open" else "")
    text = cut(h.text, words or RECORD_TEXT_MAX)  # whole: the record keeps no more than that
    return f"{HYPOTHESIS_ICON[h.status]} *{h.id}* {text} ({_person(h.author)}){decided}"


def _person(author: str) -> str:
    return escape_keeping_mentions(person(author))


def escape_keeping_mentions(text: str) -> str:
    """Text escaped for mrkdwn, except Slack user mentions (`<@U123>`): those gpuops wrote (a note's author, who
    stopped a launch) and those a person's words carry."""
    return re.sub(r"&lt;@([UW][A-Z0-9]{2,})&gt;", r"<@\1>", escape_mrkdwn(text))


def recorded_text(recorded: Recorded) -> str:
    """What a word recorded in an incident thread, as said there: to the person who just said it, or, for a word
    recorded from a terminal (its author ``cli:<login>``), to the thread that has not seen it."""
    said = escape_keeping_mentions(recorded.text)  # a person mentioned in it stays a mention
    what = (f"Recorded *{recorded.hypothesis_id}*: {said}" if recorded.kind == "hypothesis"
            else f"Noted: {said}" if recorded.kind == "note"
            else f"*{recorded.hypothesis_id}* {recorded.kind}: {said}")
    return f":keyboard: {escape_mrkdwn(recorded.author)}, from a terminal: {what}" if recorded.from_terminal else what


MENTION_HELP = ("In an incident thread: `@gpuops triage [container|attempt]`, `@gpuops status [target]`, "
                "`@gpuops log [container|attempt] [lines]`, `@gpuops hypothesis <text>`, "
                "`@gpuops confirm H1 <why>`, `@gpuops refute H1 <why>`, `@gpuops note <text>`, `@gpuops history`")



def health_messages(report: HealthReport) -> list[SlackMessage]:
    """The daily report: one message, or as many as Slack's limits need (a large fleet's findings are never cut)."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(report.generated_at))
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(
        text=f":stethoscope: *GPU health* — last {report.window_h:g} h, computed {when}"))]
    table = render("health.txt.j2", r=report).split("\n")
    blocks += monospace_sections(table)
    parts = []
    if report.unreachable:
        parts.append("*Not read now* (unreachable, or nvidia-smi failing there):\n"
                     + "\n".join(f":red_circle: {escape_mrkdwn(u)}" for u in report.unreachable))
    if report.stopped:
        parts.append("*Stopped now* (the node says so; nothing in them holds a GPU):\n"
                     + "\n".join(f"{STATE_ICON['stopped']} {escape_mrkdwn(u)}" for u in report.stopped))
    if report.findings:
        parts.append("*Findings:*\n" + "\n".join(f":warning: {escape_mrkdwn(f)}" for f in report.findings))
    else:
        parts.append(":large_green_circle: nothing held idle, no orphaned memory, no heat")
    if report.changes:
        parts.append("*Since the last report:*\n" + "\n".join(f"• {escape_mrkdwn(c)}" for c in report.changes))
    if report.versions:
        parts.append("*Versions:* " + escape_mrkdwn("; ".join(f"{t}: {v}" for t, v in sorted(report.versions.items()))))
    if report.hardware:
        parts.append("*ECC and Xid:*\n" + "\n".join(f"• {escape_mrkdwn(h)}" for h in report.hardware))
    for part in parts:
        blocks += [SectionBlock(text=MarkdownTextObject(text=p)) for p in _split_text(part)]
    text = (f"GPU health: {len(report.gpus)} GPUs, {len(report.findings)} findings, "
            f"{len(report.unreachable)} not read" + (f", {len(report.stopped)} stopped" if report.stopped else ""))
    pages = paged(blocks)
    return [SlackMessage(text + (f" (part {n}/{len(pages)})" if len(pages) > 1 else ""), page)
            for n, page in enumerate(pages, 1)]
