"""The daily health report as Slack messages: whole, within Slack's limits."""

from bot.core.health import build_report
from bot.views import MESSAGE_TEXT_LIMIT, blocks_to_text, health_messages
from tests.core.test_health import sample, ts


def test_a_large_fleets_report_goes_out_whole_in_messages_slack_takes():
    """40 nodes x 8 GPUs, each held while idle for hours by a container: every GPU's line and every finding is
    posted (the report used to be cut at 50 blocks, losing the rest in silence)."""
    now = ts("2026-12-03 08:30")
    samples = [sample(now - h * 3600, gpu, 30000, 0, {f"CT {100 + gpu}": 30000}, target=f"pve{n}")
               for n in range(40) for gpu in range(8) for h in (3, 2, 1, 0)]
    report = build_report(samples, [], now, None)
    assert len(report.findings) == 320
    messages = health_messages(report)
    assert len(messages) > 1
    for message in messages:
        texts = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
        assert len(message.blocks) <= 50 and sum(map(len, texts)) <= MESSAGE_TEXT_LIMIT
    shown = "\n".join(blocks_to_text(m.blocks) for m in messages)
    assert all(finding in shown for finding in report.findings)
    assert all(f"pve{n} GPU 7 " in shown for n in range(40))
