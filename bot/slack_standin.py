"""A local stand-in for the Slack Web API: answers like Slack and records every call.

Slack's servers are the one outside system the lab and the tests cannot reach, so this
server takes their place on 127.0.0.1. It speaks the same wire format slack_sdk uses
(form or JSON bodies, ``Authorization: Bearer``), returns Slack-shaped answers, accepts
file uploads (``files.getUploadURLExternal`` → upload → ``files.completeUploadExternal``)
and response_url posts, and can be told to fail a method, rate-limit it (429 with
``Retry-After``) or answer it 503 as Slack's servers do when in trouble. A message Slack would
refuse for its size is refused here too, with Slack's error (see ``refused_for_size``), so every
message a test sends is held to Slack's limits.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

# Slack's limits on a message's blocks (https://api.slack.com/reference/block-kit/blocks): a section's text, a
# button's text, the blocks in one message. Beyond those, Slack refuses blocks whose text together is too long
# (msg_blocks_too_long) at about 13,300 characters, though no single block is: measured at 13,297 characters of
# markdown blocks in slackapi/bolt-js#2509.
SECTION_TEXT_MAX = 3000
BUTTON_TEXT_MAX = 75
BLOCKS_MAX = 50
BLOCKS_TEXT_MAX = 13_297
SENDS_MESSAGES = {"chat.postMessage", "chat.update", "chat.postEphemeral", "response_url"}


def _texts(node: Any) -> list[str]:
    """Every text a block shows: its ``text`` strings, nested in sections, fields, contexts and buttons."""
    if isinstance(node, list):
        return [t for item in node for t in _texts(item)]
    found: list[str] = []
    for key, value in node.items() if isinstance(node, dict) else ():
        found += [value] if key == "text" and isinstance(value, str) else _texts(value)
    return found


def refused_for_size(blocks: list[dict[str, Any]]) -> str | None:
    """The error Slack answers a message with these blocks, or None when it takes them."""
    if len(blocks) > BLOCKS_MAX:
        return "invalid_blocks"
    for block in blocks:
        if block.get("type") == "section" and len("".join(_texts(block.get("text")))) > SECTION_TEXT_MAX:
            return "invalid_blocks"
        buttons = [e for e in block.get("elements") or [] if isinstance(e, dict) and e.get("type") == "button"]
        if any(len("".join(_texts(b.get("text")))) > BUTTON_TEXT_MAX for b in buttons):
            return "invalid_blocks"
    if sum(len(t) for t in _texts(blocks)) > BLOCKS_TEXT_MAX:
        return "msg_blocks_too_long"
    return None


def _blocks_of(params: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = params.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


@dataclass
class Call:
    method: str  # Web API method, or "response_url" / "upload"
    params: dict[str, Any]
    headers: dict[str, str]
    answer: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    @property
    def delivered(self) -> bool:
        """Slack accepted it (a response_url post or an API call answered ok)."""
        return bool(self.answer.get("ok"))

    @property
    def blocks(self) -> list[dict[str, Any]]:
        return _blocks_of(self.params)


class SlackStandIn:
    def __init__(self, bot_user_id: str = "U0GPUOPS", team_id: str = "T0LAB") -> None:
        self.calls: list[Call] = []
        # method (or "response_url") -> Slack error code (persistent until removed)
        self.fail: dict[str, str] = {}
        self.rate_limit: dict[str, int] = {}  # method -> how many 429s to answer first
        self.unavailable: dict[str, int] = {}  # method -> how many 503s (Slack's servers in trouble) to answer first
        # method -> a test's pick: the Slack error for a call it picks by its parameters, None to answer it as usual
        self.fail_if: dict[str, Callable[[dict[str, Any]], str | None]] = {}
        self.usergroups: dict[str, list[str]] = {}  # group id -> member user ids
        self.bot_user_id = bot_user_id
        self.team_id = team_id
        self._ts = itertools.count(1)
        self._files = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._changed: asyncio.Condition | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def response_url(self, key: str = "r") -> str:
        return f"http://127.0.0.1:{self.port}/respond/{key}"

    # server ---------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)  # some slack_sdk methods use GET (usergroups.list)
        app.router.add_post("/respond/{key}", self._respond)
        app.router.add_post("/upload/{file_id}", self._upload)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self.port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        self._changed = asyncio.Condition()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def _body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if request.content_type == "application/json":
            body: dict[str, Any] = json.loads(raw or b"{}")
            return body
        return dict(parse_qsl(raw.decode(), keep_blank_values=True))

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._body(request)
        params.update(request.query)
        status, headers = 200, {}
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() or str(params.get("token", ""))
        if self.rate_limit.get(method, 0) > 0:
            self.rate_limit[method] -= 1
            answer: dict[str, Any] = {"ok": False, "error": "ratelimited"}
            status, headers = 429, {"Retry-After": "1"}
        elif self.unavailable.get(method, 0) > 0:
            self.unavailable[method] -= 1
            answer = {"ok": False, "error": "service_unavailable"}
            status = 503
        elif not token.startswith(("xoxb-", "xoxp-", "xapp-")):
            answer = {"ok": False, "error": "not_authed"}
        elif method in self.fail:
            answer = {"ok": False, "error": self.fail[method]}
        elif method in self.fail_if and (picked := self.fail_if[method](params)):
            answer = {"ok": False, "error": picked}
        elif method in SENDS_MESSAGES and (too_big := refused_for_size(_blocks_of(params))):
            answer = {"ok": False, "error": too_big}
        else:
            answer = self._answer(method, params, request)
        await self._record(Call(method, params, dict(request.headers), answer))
        return web.json_response(answer, status=status, headers=headers)

    def _answer(self, method: str, params: dict[str, Any], request: web.Request) -> dict[str, Any]:
        channel = params.get("channel", "C0LAB")
        if method == "auth.test":
            return {"ok": True, "url": "https://lab.slack.invalid/", "team": "lab", "user": "gpuops",
                    "team_id": self.team_id, "user_id": self.bot_user_id, "bot_id": "B0GPUOPS"}
        if method == "chat.postMessage":
            ts = f"{int(time.time())}.{next(self._ts):06d}"
            return {"ok": True, "channel": channel, "ts": ts,
                    "message": {"text": params.get("text", ""), "ts": ts, "thread_ts": params.get("thread_ts")}}
        if method == "chat.update":
            return {"ok": True, "channel": channel, "ts": params.get("ts"), "text": params.get("text", "")}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{int(time.time())}.{next(self._ts):06d}"}
        if method in ("chat.delete", "reactions.add", "conversations.join"):
            return {"ok": True}
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._files):08d}"
            return {"ok": True, "file_id": file_id,
                    "upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}"}
        if method == "files.completeUploadExternal":
            files = params.get("files")
            files = json.loads(files) if isinstance(files, str) else files or []
            return {"ok": True, "files": [{"id": f.get("id"), "title": f.get("title")} for f in files]}
        if method == "usergroups.list":
            return {"ok": True, "usergroups": [{"id": gid, "handle": gid.lower(), "users": users}
                                               for gid, users in self.usergroups.items()]}
        if method == "users.info":
            return {"ok": True, "user": {"id": params.get("user"), "name": params.get("user")}}
        if method == "conversations.info":
            return {"ok": True, "channel": {"id": channel, "name": "lab"}}
        return {"ok": False, "error": "unknown_method"}

    async def _respond(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        refused = self.fail.get("response_url") or refused_for_size(_blocks_of(body))
        await self._record(Call("response_url", body, dict(request.headers),
                                {"ok": False, "error": refused} if refused else {"ok": True}))
        # a response_url answers in plain text: 404 with the reason once it expired or was used up
        return web.Response(status=404, text=refused) if refused else web.Response(text="ok")

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        await self._record(Call("upload", {"file_id": request.match_info["file_id"], "bytes": len(data),
                                           "content": data}, dict(request.headers), {"ok": True}))
        return web.Response(text=f"OK - {len(data)}")

    # reading what was sent ----------------------------------------------------------
    def of(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    async def wait_for(self, predicate: Callable[[list[Call]], bool], timeout_s: float = 10.0) -> list[Call]:
        """Wait (in the stand-in's own loop) until ``predicate(calls)`` holds."""
        assert self._changed is not None
        deadline = time.monotonic() + timeout_s
        async with self._changed:
            while not predicate(list(self.calls)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the Slack stand-in did not receive the expected calls")
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except TimeoutError:
                    continue
        return list(self.calls)


# -- the Slack side of an incoming request ---------------------------------------------

def signed_headers(signing_secret: str, body: str, timestamp: int | None = None) -> dict[str, str]:
    """Headers exactly as Slack signs a request: v0=HMAC-SHA256(secret, "v0:<ts>:<body>")."""
    import hashlib
    import hmac

    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(signing_secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def slack_escaped(typed: str) -> str:
    """What a person typed as Slack delivers it: `&`, `<` and `>` as HTML entities (its control characters)."""
    return typed.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slash_body(
    command: str, text: str, *, user_id: str = "U0ALICE", channel_id: str = "C0LAB", response_url: str = "",
    team_id: str = "T0LAB", trigger_id: str = "1337.42",
) -> str:
    """The form body Slack sends for a slash command (its text escaped as Slack escapes every text it sends)."""
    from urllib.parse import urlencode

    return urlencode({
        "token": "legacy-verification-token-unused", "team_id": team_id, "team_domain": "lab",
        "channel_id": channel_id, "channel_name": "gpu-ops", "user_id": user_id, "user_name": user_id.lower(),
        "command": command, "text": slack_escaped(text), "api_app_id": "A0GPUOPS", "response_url": response_url,
        "trigger_id": trigger_id,
    })


def block_action_body(action_id: str, value: str, *, user_id: str, channel_id: str = "C0LAB", response_url: str = "",
                      message_ts: str = "1.000001", team_id: str = "T0LAB") -> str:
    """The form body Slack sends when someone clicks a button (payload=<json>)."""
    import json as _json
    from urllib.parse import urlencode

    payload = {
        "type": "block_actions", "team": {"id": team_id, "domain": "lab"},
        "user": {"id": user_id, "username": user_id.lower(), "team_id": team_id},
        "api_app_id": "A0GPUOPS", "token": "legacy-verification-token-unused", "trigger_id": "1337.43",
        "channel": {"id": channel_id, "name": "gpu-ops"}, "container": {"type": "message", "message_ts": message_ts,
                                                                        "channel_id": channel_id},
        "message": {"ts": message_ts, "type": "message", "text": ""}, "response_url": response_url,
        "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": value,
                     "action_ts": str(time.time())}],
    }
    return urlencode({"payload": _json.dumps(payload)})


def mention_event_body(text: str, *, user_id: str, channel_id: str = "C0LAB", thread_ts: str | None = None,
                       event_id: str | None = None, team_id: str = "T0LAB", bot_user_id: str = "U0GPUOPS") -> str:
    """The JSON body Slack's Events API sends for an app mention."""
    import json as _json
    import secrets as _secrets

    ts = f"{int(time.time())}.{_secrets.randbelow(999999):06d}"
    event = {"type": "app_mention", "user": user_id, "text": f"<@{bot_user_id}> {slack_escaped(text)}", "ts": ts,
             "channel": channel_id, "event_ts": ts, "team": team_id}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return _json.dumps({"token": "legacy-verification-token-unused", "team_id": team_id, "api_app_id": "A0GPUOPS",
                        "event": event, "type": "event_callback", "event_id": event_id or "Ev" + _secrets.token_hex(6),
                        "event_time": int(time.time()), "authorizations": [
                            {"team_id": team_id, "user_id": bot_user_id, "is_bot": True}]})
