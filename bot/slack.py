"""Sending to Slack: the Web API client's construction and the posting helpers.

slack_sdk retries no 429 by default; the client here gets its rate-limit and
connection-error retry handlers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import GpuopsError
from bot.views import SlackMessage

log = logging.getLogger(__name__)
FALLBACK_ERRORS = {"not_in_channel", "channel_not_found", "is_archived"}
# a message there cannot be sent or edited however often it is tried again (the channel is gone or archived, the bot
# was removed, the token revoked): a retry loop would only log the same refusal every tick
UNREACHABLE_ERRORS = FALLBACK_ERRORS | {"thread_not_found", "cant_update_message", "account_inactive", "invalid_auth",
                                        "token_revoked", "team_access_not_granted"}
CHANNEL_PACE_S = 1.0  # Slack allows about one message per second per channel


class ChannelPace:
    """Spaces posts to one channel at least ``spacing_s`` apart.

    Alone, it paces this process. Given ``shared`` (the store's slot reservation), every
    replica on one Redis books slots from one timeline, so N replicas together still post at
    most one message per second per channel. If Redis cannot be reached the local pace holds:
    a post is delayed, never dropped.
    """

    def __init__(self, clock: Any = time.monotonic, spacing_s: float = CHANNEL_PACE_S,
                 shared: Callable[[str, float], Awaitable[float]] | None = None) -> None:
        self._last: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._clock = clock
        self.spacing_s = spacing_s
        self.shared = shared

    async def wait(self, channel: str) -> None:
        if self.shared is not None:
            try:
                delay = await self.shared(channel, self.spacing_s)
            except GpuopsError as exc:
                log.warning("shared channel pace unavailable (%s); pacing this process only", exc.user_message)
            else:
                if delay > 0:
                    await asyncio.sleep(delay)
                return
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            wait = self._last.get(channel, -1e9) + self.spacing_s - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last[channel] = self._clock()



def slack_error(exc: BaseException) -> str | None:
    """The Web API's error code when Slack refused a call (``message_not_found``, ...); None for anything else."""
    return str(exc.response.get("error", "")) if isinstance(exc, SlackApiError) else None


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
    pace: ChannelPace,
    respond: Any = None,
    thread_ts: str | None = None,
    broadcast: bool = False,
) -> list[str]:
    """Post in order; returns the ``ts`` of each. When the bot is not in the channel, fall
    back to the command's response_url so the answer is never lost. ``broadcast``: a thread reply
    that is also shown in the channel."""
    posted: list[str] = []
    for message in messages:
        await pace.wait(channel)
        try:
            answer = await client.chat_postMessage(
                channel=channel, text=message.text, blocks=message.blocks, thread_ts=thread_ts,
                unfurl_links=False, unfurl_media=False, reply_broadcast=(broadcast and thread_ts is not None) or None,
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
