"""`/sglang log`'s answer: a log's last lines, numbered as in the file, in messages Slack takes."""

import json

from bot.attempt_log import AttemptLog
from bot.core.attempts import Attempt, AttemptStatus
from bot.core.log_lines import LogTail
from bot.views import MESSAGE_TEXT_LIMIT, attempt_log_messages, blocks_to_text
from tests.conftest import FIXTURES


def real_lines() -> list[str]:
    """Every line of the corpus's failure and startup logs, in order: real SGLang output of every length."""
    lines: list[str] = []
    for corpus in ("sglang-failures", "sglang-startup"):
        for row in (FIXTURES / corpus / "cases.jsonl").read_text().splitlines():
            excerpt = json.loads(row).get("log_excerpt") if row else None
            lines += excerpt if isinstance(excerpt, list) else (excerpt or "").split("\n")
    return lines


def failed_attempt() -> Attempt:
    a = Attempt("a20261202-120000-abcd", "U1", "C1", "pve5", 129, "sglang-a6000", "/models/q", ("--tp", "2"),
                30000, 1.0, pid=4242, log_path="/var/log/gpuops/a20261202-120000-abcd.log")
    return a.moved(AttemptStatus.PLANNED, 1.0).moved(AttemptStatus.LAUNCHING, 2.0).moved(AttemptStatus.FAILED, 3.0)


def test_two_hundred_long_lines_go_out_in_messages_slack_takes_every_line_once_in_order():
    lines = [x for x in real_lines() if len(x) > 100][:200]
    assert len(lines) == 200 and sum(map(len, lines)) > 2 * MESSAGE_TEXT_LIMIT
    tail = LogTail(first_line=1001, lines=tuple(lines), total_lines=1200, modified_at=1000.0, cut=False)
    messages = attempt_log_messages(AttemptLog(failed_attempt(), tail), now=1000.0 + 720)
    assert len(messages) > 1
    for message in messages:
        texts = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
        assert sum(map(len, texts)) <= MESSAGE_TEXT_LIMIT and len(message.blocks) <= 50
    shown = "\n".join(blocks_to_text(m.blocks) for m in messages)
    assert "— lines 1,001–1,200 of 1,200, last written 12 min ago" in shown
    numbered = [line for line in shown.split("\n") if line[:6].strip().isdigit()]
    assert [int(line[:6]) for line in numbered] == list(range(1001, 1201))
    assert messages[0].text.endswith(f"(part 1/{len(messages)})")
    assert "`/sglang triage a20261202-120000-abcd` reads it whole" in blocks_to_text(messages[-1].blocks)


def test_a_short_tail_is_one_message_and_a_missing_log_says_why():
    lines = real_lines()[:40]
    tail = LogTail(first_line=7, lines=tuple(lines), total_lines=46, modified_at=0.0, cut=True)
    (message,) = attempt_log_messages(AttemptLog(failed_attempt(), tail), now=30.0)
    text = blocks_to_text(message.blocks)
    assert "lines 7–46 of 46, last written 30 s ago" in text and f"     7  … {lines[0]}"[:60] in text
    (missing,) = attempt_log_messages(AttemptLog(failed_attempt(), None, "/var/log/gpuops/a.log could not be read"),
                                      now=30.0)
    assert "could not be read" in blocks_to_text(missing.blocks) and "Log of" in missing.text
