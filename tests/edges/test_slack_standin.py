"""The Slack stand-in refuses what Slack refuses for size, so every message the tests send is held to Slack's limits."""

import asyncio

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_standin import SlackStandIn, refused_for_size


def sections(*lengths: int) -> list[dict]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * n}} for n in lengths]


def test_slacks_limits_on_a_messages_blocks():
    assert refused_for_size(sections(3000, 3000, 3000, 3000, 1297)) is None  # 13,297 characters together
    assert refused_for_size(sections(3000, 3000, 3000, 3000, 1298)) == "msg_blocks_too_long"
    assert refused_for_size(sections(3001)) == "invalid_blocks"
    assert refused_for_size(sections(*[1] * 50)) is None
    assert refused_for_size(sections(*[1] * 51)) == "invalid_blocks"
    button = {"type": "button", "text": {"type": "plain_text", "text": "y" * 75}, "value": "v" * 2000}
    assert refused_for_size([{"type": "actions", "elements": [button]}]) is None  # a value is not shown
    long_button = {**button, "text": {"type": "plain_text", "text": "y" * 76}}
    assert refused_for_size([{"type": "actions", "elements": [long_button]}]) == "invalid_blocks"
    context = {"type": "context", "elements": [{"type": "mrkdwn", "text": "z" * 10_000}]}
    assert refused_for_size([context, *sections(3000, 297)]) is None
    assert refused_for_size([context, *sections(3000, 298)]) == "msg_blocks_too_long"


def test_a_message_too_long_for_slack_is_refused_with_slacks_error():
    async def run() -> tuple[str, bool]:
        standin = SlackStandIn()
        await standin.start()
        try:
            client = AsyncWebClient(token="xoxb-test", base_url=standin.base_url)
            await client.chat_postMessage(channel="C0LAB", text="fits", blocks=sections(3000, 3000))
            try:
                await client.chat_update(channel="C0LAB", ts="1.1", text="too long", blocks=sections(*[3000] * 5))
            except SlackApiError as exc:
                return str(exc.response["error"]), standin.of("chat.postMessage")[0].delivered
            return "", False
        finally:
            await standin.stop()

    assert asyncio.run(run()) == ("msg_blocks_too_long", True)
