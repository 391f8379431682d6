"""Rendering: Jinja fragments hold the words, Python owns the block structure.

Block Kit is built with slack_sdk's models, whose ``to_dict()`` enforces Slack's limits;
long monospace tables are split across sections (3000 characters each) and messages
(50 blocks each), so 8 GPUs with 20 processes each still fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    DividerBlock,
    MarkdownTextObject,
    SectionBlock,
)

from bot.core.budget import Budget
from bot.core.inventory import Inventory
from bot.core.report import TargetView, target_view
from bot.status import StatusReport

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SECTION_LIMIT = 3000
BLOCKS_PER_MESSAGE = 50
STATE_ICON = {
    "ok": ":large_green_circle:",
    "attention": ":large_yellow_circle:",
    "unreachable": ":red_circle:",
    "smi-error": ":red_circle:",
    "unreadable": ":warning:",
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
    return f"GPU status: {len(views)} target{'s' if len(views) != 1 else ''} ({parts}) in {report.elapsed_s:.1f}s"


def status_messages(report: StatusReport) -> list[SlackMessage]:
    """One message, or several when Slack's 50-block limit requires it."""
    blocks: list[Block] = []
    for i, status in enumerate(report.statuses):
        if i:
            blocks.append(DividerBlock())
        blocks += target_blocks(target_view(status))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=status_summary(report))]))
    dicts = [b.to_dict() for b in blocks]  # raises SlackObjectFormationError past Slack's limits
    pages = [dicts[i:i + BLOCKS_PER_MESSAGE] for i in range(0, len(dicts), BLOCKS_PER_MESSAGE)]
    summary = status_summary(report)
    return [
        SlackMessage(summary if n == 0 else f"{summary} (part {n + 1}/{len(pages)})", page)
        for n, page in enumerate(pages)
    ]


def status_text(report: StatusReport) -> str:
    """The terminal rendering of the same answer."""
    return render("gpu_status.txt.j2", views=[target_view(s) for s in report.statuses], footer=status_summary(report))


def help_text(inventory: Inventory) -> str:
    return render(
        "gpu_help.mrkdwn.j2",
        node_count=len(inventory.nodes),
        example_node=next(iter(inventory.nodes), "pve5"),
        example_container=next(iter(inventory.containers), None),
    )


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
        (":warning:", "[!]"),
    ):
        text = text.replace(icon, word)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# ----------------------------------------------------------------------------- budgets

VERDICT_WORD = {"fits": "FITS", "fails": "WILL FAIL", "degraded": "STARTS, DEGRADED"}
VERDICT_ICON = {"fits": ":large_green_circle:", "fails": ":red_circle:", "degraded": ":large_yellow_circle:"}


def budget_text(budget: Budget, title: str) -> str:
    return render("budget.txt.j2", b=budget, title=title, verdict_word=VERDICT_WORD[budget.verdict.value])


def budget_messages(budget: Budget, title: str) -> list[SlackMessage]:
    """The explanation as Block Kit: summary, the per-GPU table, the verdict, the remedies."""
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
        verdict_lines.append(f":x: SGLang would print: `{escape_mrkdwn(budget.error_text)}`")
    verdict_lines += [f":warning: {escape_mrkdwn(r)}" for r in budget.reasons]
    for part in _split_text("\n".join(verdict_lines)):
        blocks.append(SectionBlock(text=MarkdownTextObject(text=part)))
    if budget.remedies:
        remedy_text = "*Remedies, cheapest first:*\n" + "\n".join(
            f"{i}. `{escape_mrkdwn(r.change)}` — {escape_mrkdwn(r.effect)}" for i, r in enumerate(budget.remedies, 1))
        blocks += [SectionBlock(text=MarkdownTextObject(text=part)) for part in _split_text(remedy_text)]
    if budget.not_modelled:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(
            text="Not modelled (passed through): " + escape_mrkdwn(" ".join(budget.not_modelled))[:2900])]))
    dicts = [b.to_dict() for b in blocks]
    return [SlackMessage(f"{title}: {word}", dicts[i:i + BLOCKS_PER_MESSAGE])
            for i in range(0, len(dicts), BLOCKS_PER_MESSAGE)]
