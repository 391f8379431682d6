"""Sending to Slack: the Web API client's construction and the posting helpers.

slack_sdk retries no 429 by default; the client here gets its rate-limit and
connection-error retry handlers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.views import SlackMessage

log = logging.getLogger(__name__)
FALLBACK_ERRORS = {"not_in_channel", "channel_not_found", "is_archived"}
CHANNEL_PACE_S = 1.0  # Slack allows about one message per second per channel


class ChannelPace:
    """Spaces this process's posts to one channel at least CHANNEL_PACE_S apart."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._last: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._clock = clock

    async def wait(self, channel: str) -> None:
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            wait = self._last.get(channel, -1e9) + CHANNEL_PACE_S - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last[channel] = self._clock()


PACE = ChannelPace()


def web_client(token: str | None, base_url: str) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        timeout=15,
        retry_handlers=[
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
        ],
    )


async def post_messages(
    client: AsyncWebClient,
    channel: str,
    messages: list[SlackMessage],
    *,
    respond: Any = None,
    thread_ts: str | None = None,
) -> list[str]:
    """Post in order; returns the ``ts`` of each. When the bot is not in the channel, fall
    back to the command's response_url so the answer is never lost."""
    posted: list[str] = []
    for message in messages:
        await PACE.wait(channel)
        try:
            answer = await client.chat_postMessage(
                channel=channel, text=message.text, blocks=message.blocks, thread_ts=thread_ts,
                unfurl_links=False, unfurl_media=False,
            )
            posted.append(str(answer["ts"]))
        except SlackApiError as exc:
            error = exc.response.get("error", "")
            if respond is None or error not in FALLBACK_ERRORS:
                raise
            log.warning("chat.postMessage to %s failed with %s; answering through response_url", channel, error)
            await respond(text=message.text, blocks=message.blocks, response_type="ephemeral",
                          replace_original=False)
    return posted


async def upload_png(client: AsyncWebClient, channel: str, thread_ts: str | None, png: bytes, filename: str,
                     title: str) -> None:
    """Attach a picture to a thread (files.getUploadURLExternal -> upload -> completeUploadExternal)."""
    await client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=png, filename=filename, title=title)
