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
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import GpuopsError
from bot.views import SlackMessage

log = logging.getLogger(__name__)
# a message there cannot be sent or edited however often it is tried again (the channel is gone or archived, the bot
# was removed, the token revoked): a retry loop would only log the same refusal every tick
UNREACHABLE_ERRORS = {"not_in_channel", "channel_not_found", "is_archived", "thread_not_found", "cant_update_message",
                      "account_inactive", "invalid_auth", "token_revoked", "team_access_not_granted"}
# the message itself is refused (a bug of the bot's): sent through a response_url instead, it would be refused too
MESSAGE_ERRORS = {"invalid_blocks", "invalid_blocks_format", "msg_too_long", "msg_blocks_too_long", "no_text",
                  "too_many_attachments", "invalid_attachments"}
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
            # Slack's servers answering 500/503 for a moment: tried again after about 0.5 s, then 1 s, rather than the
            # answer going to a fallback (a response_url, the next tick) or, for a terminal's report, lost
            AsyncServerErrorRetryHandler(max_retry_count=2),
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
    """Post in order; returns the ``ts`` of each. When Slack refuses to post a message (the bot is not in the
    channel, a passing ``internal_error``) rather than the message itself, it goes to the person through the
    command's response_url instead, so the answer is not lost; the refusal is raised when that fails too.
    ``broadcast``: a thread reply that is also shown in the channel."""
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
            error = slack_error(exc)
            if respond is None or error in MESSAGE_ERRORS:
                raise
            log.warning("chat.postMessage to %s failed with %s; answering through response_url", channel, error)
            if await responded(respond, text=message.text, blocks=message.blocks, response_type="ephemeral",
                               replace_original=False) is not None:
                raise
    return posted


async def responded(respond: Any, **message: Any) -> str | None:
    """Send ``message`` through a response_url (Bolt's ``respond``); None when Slack took it, else why not (it
    answers an expired or used-up URL with an HTTP error, which ``respond`` does not raise)."""
    try:
        answer = await respond(**message)
    except Exception as exc:  # the response_url's host could not be reached
        why = type(exc).__name__
    else:
        status = getattr(answer, "status_code", 200)
        if status < 300:
            return None
        why = f"HTTP {status} {str(getattr(answer, 'body', ''))[:80]}"
    log.warning("answering through the response_url failed (%s)", why)
    return why


async def upload_png(client: AsyncWebClient, channel: str, thread_ts: str | None, png: bytes, filename: str,
                     title: str) -> None:
    """Attach a picture to a thread (files.getUploadURLExternal -> upload -> completeUploadExternal)."""
    await client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=png, filename=filename, title=title)
