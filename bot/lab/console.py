"""The lab: the whole bot on one machine, no Slack workspace, GPU or Proxmox needed.

It starts an embedded Redis, lab nodes (real SSH servers acting as Proxmox nodes), the
Slack stand-in and the real Bolt app on loopback HTTP. Typed commands are sent to the app
as correctly signed slash-command requests, exactly as Slack would send them, and what
the app posts back to "Slack" is printed as text.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from bot.app import Services, after_start, build_app, build_services, serve_http
from bot.config import Settings, parse_inventory
from bot.core.attempts import Attempt
from bot.lab.nodes import LAB_DIR, LabNode, container_path, free_port, seed_node_state, start_node
from bot.signals import cleaning_up
from bot.slack_standin import Call, SlackStandIn, block_action_body, mention_event_body, signed_headers, slash_body
from bot.views import blocks_to_text

LAB_DATA = Path(__file__).resolve().parent / "data"
PROMPT = "gpuops> "
SAID = ("chat.postMessage", "chat.update", "response_url")  # what the app says in Slack, as the console shows it
CHANNEL = "C0LAB"  # the channel the console's commands are typed in (the stand-in's requests' default)
# the lab's settings that differ from a deployment's, for speed on loopback: the app's, and its terminal's
LAB_TIMINGS: dict[str, Any] = {
    "status_deadline_s": 4.0, "ssh_connect_timeout_s": 3.0, "progress_poll_s": 0.3, "progress_update_s": 0.5,
    "stop_timeout_s": 5.0,
}


async def _cancel_others(timeout_s: float = 10.0) -> None:
    """Cancel every task of this process but the caller's, and wait for them to end (at most ``timeout_s``)."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=timeout_s)


@dataclass
class Lab:
    workdir: Path
    nodes: dict[str, LabNode] = field(default_factory=dict)
    standin: SlackStandIn = field(default_factory=SlackStandIn)
    services: Services | None = None
    runner: web.AppRunner | None = None
    app_url: str = ""
    signing_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    unreachable_port: int = 0
    app: Any = None

    async def start(self, redis_url: str | None = None, prefer: str = "openssh") -> Lab:
        """pve5 (2x A6000, CT 129 'sglang-a6000'), pve6 (nvidia-smi says driver/library
        mismatch) and pve7 (nothing listening: unreachable)."""
        self.nodes["pve5"] = await start_node(self.workdir / "pve5", "pve5", prefer=prefer)
        broken = seed_node_state("pve6", vmid=131)
        broken["smi"] = {"error": (LAB_DATA / "nvml-mismatch-with-lib-version-550.txt").read_text(), "exit": 18}
        self.nodes["pve6"] = await start_node(self.workdir / "pve6", "pve6", state=broken, prefer=prefer)
        self.unreachable_port = free_port()
        inventory_data = {
            "nodes": {
                **{name: node.inventory_entry() for name, node in self.nodes.items()},
                "pve7": {**self.nodes["pve5"].inventory_entry(), "port": self.unreachable_port},
            },
            "containers": {"sglang-a6000": {
                "node": "pve5", "vmid": 129, "python": sys.executable,
                "log_dir": container_path(self.nodes["pve5"], 129, "logs"),
                "hf_cache": container_path(self.nodes["pve5"], 129, "hf-cache")}},
            "roles": {"admins": ["U0ADMIN"], "operators": ["U0ALICE", "S0INFRA"], "viewers": ["*"]},
        }
        inventory_path = self.workdir / "inventory.yml"
        inventory_path.write_text(yaml.safe_dump(inventory_data, sort_keys=False))
        await self.standin.start()
        settings = Settings(
            slack_bot_token="xoxb-lab-" + secrets.token_hex(8),
            slack_signing_secret=self.signing_secret,
            slack_api_url=self.standin.base_url,
            inventory=inventory_path,
            redis_url=redis_url,
            data_dir=self.workdir / "data",
            **LAB_TIMINGS,
        )
        self.services = build_services(settings, parse_inventory(inventory_data, str(inventory_path)))
        app = build_app(self.services)
        port = free_port()
        self.runner = await serve_http(app, "127.0.0.1", port, self.services)
        self.app_url = f"http://127.0.0.1:{port}/slack/events"
        self.app = app
        await after_start(app, self.services)
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.services is not None:
            await self.services.close()
        await self.standin.stop()
        for node in self.nodes.values():
            await node.stop()

    async def terminal(self, args: list[str]) -> tuple[int, str]:
        """``gpuops <args>`` run as a person would in a terminal beside the bot: its own process, on this lab's
        inventory and Redis (the same records the app writes); returns its exit status and what it printed."""
        if args[:1] in (["lab"], ["demo"], ["serve"]):
            return 2, f"gpuops {args[0]}: not from inside the lab (it runs its own)"
        assert self.services is not None
        redis = self.services.settings.redis_url or (
            self.services.embedded_redis.url if self.services.embedded_redis is not None else "")
        env = {**os.environ, "GPUOPS_INVENTORY": str(self.workdir / "inventory.yml"), "REDIS_URL": redis,
               # the lab's own timings, as the bot beside it has them (a stop's grace: 5 s, not 20)
               **{f"GPUOPS_{name.upper()}": str(value) for name, value in LAB_TIMINGS.items()}}
        # no input: a question (`gpuops stop`, `gpuops free`) is answered no at once, instead of taking the
        # console's next line unseen (its prompt is shown only when the command ends); --yes answers it
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", *args], capture_output=True,
                                       stdin=subprocess.DEVNULL, text=True, env=env, timeout=300, check=False)
        return done.returncode, (done.stdout + done.stderr).rstrip("\n")

    async def click(self, action_id: str, value: str, user_id: str = "U0ALICE",
                    response_url: str | None = None) -> tuple[int, list[Call]]:
        """A signed button click, as Slack sends it; returns the HTTP status and the calls it caused."""
        before = len(self.standin.calls)
        body = block_action_body(action_id, value, user_id=user_id,
                                 response_url=response_url or self.standin.response_url("click"))
        async with aiohttp.ClientSession() as http, http.post(
            self.app_url, data=body, headers=signed_headers(self.signing_secret, body)
        ) as answer:
            status = answer.status
        return status, self.standin.calls[before:]

    async def mention(self, text: str, thread_ts: str, user_id: str = "U0ALICE", event_id: str | None = None) -> int:
        """A signed Events API delivery of `@gpuops <text>` in a thread."""
        body = mention_event_body(text, user_id=user_id, thread_ts=thread_ts, event_id=event_id)
        headers = {**signed_headers(self.signing_secret, body), "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as http, http.post(self.app_url, data=body, headers=headers) as answer:
            return answer.status

    def button(self, words: str) -> tuple[str, str, str] | None:
        """The latest button posted whose text contains ``words`` (any case): (its text, action id, value)."""
        for call in reversed(self.standin.calls):
            for block in call.blocks if call.delivered else ():
                for element in block.get("elements", []) if block.get("type") == "actions" else ():
                    label = element.get("text", {}).get("text", "")
                    if words.lower() in label.lower():
                        return label, element["action_id"], element["value"]
        return None

    async def latest_thread(self) -> Attempt | None:
        """The latest launch made from Slack: a typed `@gpuops` speaks in its thread."""
        assert self.services is not None
        launched = [a for a in await self.services.attempts.recent(count=50) if a.thread_ts and a.channel]
        return launched[0] if launched else None

    async def mention_answered(self, text: str, thread_ts: str, timeout_s: float = 120.0) -> int:
        """`@gpuops <text>` in a thread, once the app has answered it: it said something there (a reply, the summary,
        a refusal) and let go of the thread's lock, which it holds from before its first word there to its last."""
        assert self.services is not None
        before = len(self.standin.calls)
        status = await self.mention(text, thread_ts)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            said = any(c.delivered and (c.params.get("thread_ts") == thread_ts or c.method == "chat.update")
                       for c in self.standin.calls[before:])
            if said and not await self.services.incidents.busy(CHANNEL, thread_ts):
                break
            await asyncio.sleep(0.1)
        return status

    async def next_tick(self) -> list[str]:
        """What the bot's scheduler does on its next tick for the incident threads (`gpuops serve` ticks every 30 s):
        the containers whose threads it brought up to date after a terminal changed them."""
        from bot.scheduler import Scheduler

        assert self.services is not None
        return await Scheduler(self.services, self.app.client).update_threads()

    async def slash(self, command: str, text: str, user_id: str = "U0ALICE",
                    answered: bool = True) -> tuple[int, str, list[Call]]:
        """Send a signed slash command; return (HTTP status, ack text, calls it caused). ``answered``: wait for the
        answer Slack took (False when Slack is made to refuse it)."""
        before = len(self.standin.calls)
        body = slash_body(command, text, user_id=user_id, response_url=self.standin.response_url())
        async with aiohttp.ClientSession() as http, http.post(
            self.app_url, data=body, headers=signed_headers(self.signing_secret, body)
        ) as answer:
            status, ack = answer.status, await answer.text()
        if answered and ack.endswith("…"):  # acknowledged: the answer follows as a message
            await self.standin.wait_for(
                lambda calls: any(c.method in ("chat.postMessage", "response_url") and c.delivered
                                  for c in calls[before:]),
                timeout_s=30,
            )
        return status, ack, self.standin.calls[before:]


def transcript(command: str, status: int, ack: str, calls: list[Call]) -> str:
    out = [f"> {command}", f"  (HTTP {status}) {ack}"]
    for call in calls:
        if call.method in ("chat.postMessage", "response_url") and call.delivered:
            out.append(blocks_to_text(call.blocks) or str(call.params.get("text", "")))
    return "\n".join(out)


class SlackFeed:
    """What the app says in "Slack" between the commands typed, printed as it arrives: a launch's progress and result,
    an incident thread's replies and summary. A new message is printed whole; an edit, as the lines it changed
    (a launch card's new stage, a summary's new hypothesis), under the message's first line."""

    def __init__(self, standin: SlackStandIn, out: Callable[[str], None]) -> None:
        self.standin, self.out = standin, out
        self.cursor = 0
        self.versions: dict[str, list[str]] = {}  # message ts -> its lines as last shown

    def shown(self, upto: int) -> None:
        """Calls before ``upto`` were shown by a command's own transcript: only remember what they said."""
        for call in self.standin.calls[self.cursor:upto]:
            self._render(call)
        self.cursor = max(self.cursor, upto)

    def flush(self, at_prompt: bool = False) -> None:
        """Print what arrived since (``at_prompt``: from a new line, the prompt shown again after)."""
        calls = self.standin.calls[self.cursor:]
        self.cursor += len(calls)
        printed = [text for text in map(self._render, calls) if text]
        if printed and at_prompt:
            self.out("")  # the prompt's line ends
        for text in printed:
            self.out(text)
        if printed and at_prompt:
            with suppress(OSError):
                sys.stdout.write(PROMPT)
                sys.stdout.flush()

    def _render(self, call: Call) -> str:
        if not call.delivered or call.method not in SAID:
            return ""
        lines = (blocks_to_text(call.blocks) or str(call.params.get("text", ""))).splitlines()
        ts = str(call.params.get("ts") or call.answer.get("ts") or "")
        before = self.versions.get(ts)
        if ts:
            self.versions[ts] = lines
        if call.method == "chat.update" and before is not None:
            changed = [line for line in lines if line not in before]
            if not changed:
                return ""
            # the message's first line says which it is, when the edit did not change that line itself
            which = "" if changed[0] == lines[0] else f": {lines[0][:100]}"
            return f"[Slack, edited{which}]\n" + "\n".join(changed)
        where = f", in thread {call.params['thread_ts']}" if call.params.get("thread_ts") else ""
        return f"[Slack{where}]\n" + "\n".join(lines)

    async def run(self, paused: asyncio.Event) -> None:
        """Print what arrives while no command is being answered (``paused`` set while one is)."""
        while True:
            await asyncio.sleep(0.3)
            if not paused.is_set():
                self.flush(at_prompt=True)


SCRIPT: list[tuple[str, Callable[[Lab], None] | None]] = [
    ("/gpu help", None),
    ("/gpu status", None),
    ("/gpu status sglang-a6000", lambda lab: _start_server(lab.nodes["pve5"])),
    ("/gpu status pve5", lambda lab: _kill_server_by_name(lab.nodes["pve5"])),
    ("/sglang budget sglang-a6000 {model} --tp 2 --context-length 65536 --mem-fraction-static 0.85 "
     "--enable-torch-compile --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
     "--speculative-num-draft-tokens 4 --mamba-full-memory-ratio 0.5", None),
    ("/gpu free pve5", None),
    ("click Confirm", None),
    ("/gpu status pve5", None),
    ("/sglang budget sglang-a6000 {model} --tp 2 --context-length 65536 --mem-fraction-static 0.85 "
     "--enable-torch-compile --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
     "--speculative-num-draft-tokens 4 --mamba-full-memory-ratio 0.5", None),
    ("/gpu health pve5", lambda lab: _kernel_xid(lab.nodes["pve5"])),
    ("/gpu status pve5:999", None),
    ("/gpu frobnicate", None),
]


def _start_server(node: LabNode) -> None:
    """An SGLang server in CT 129 holding both GPUs (TP=2): real processes the lab owns, so a
    `/gpu free` typed in the console stops only what the lab started."""
    for gpu in (0, 1):
        node.spawn_holder(gpu, "python3 -m sglang.launch_server", 44876, 129)


def _kill_server_by_name(node: LabNode) -> None:
    """The server was killed by name (`pkill -9 -f sglang`, seed story step 2); a child of it that had inherited the
    GPU devices lives on, so its memory stays held with no process listed, as after a real `kill -9`."""
    node.kill_listed_holders()
    node.spawn_device_holder("python3", 129, ("/dev/nvidia0", "/dev/nvidia1"), keeps_orphaned_mib={0: 44876, 1: 44876})


async def _clicked(lab: Lab, words: str) -> str:
    """Click the latest button whose text has ``words``, as the person who asked; what the app answered."""
    target = lab.button(words)
    if target is None:
        return f"> click {words}\n  no button reading {words!r} was posted"
    before = len(lab.standin.calls)
    status, _ = await lab.click(target[1], target[2])
    calls = await lab.standin.wait_for(lambda cs: any(c.method == "response_url" for c in cs[before:]), 60)
    return transcript(f"click [{target[0]}]", status, "", [c for c in calls[before:] if c.method == "response_url"])


def _kernel_xid(node: LabNode) -> None:
    """A real Xid line in the node's kernel log, two hours back, on GPU 0 (see data/SOURCE.md)."""
    line = (LAB_DIR / "data" / "xid-mmu-fault.txt").read_text().strip().replace("PCI:0000:00:06", "PCI:0000:4f:00")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(time.time() - 2 * 3600))
    state = node.read_state()
    state["kernel_log"] = [f"{stamp} {node.name} kernel: {line}"]
    node.write_state(state)


async def run_lab(script: bool, out: Callable[[str], None] = print) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="gpuops-lab-"))
    lab = Lab(workdir)
    try:
        started = time.monotonic()
        await lab.start()
        kinds = ", ".join(f"{n}={node.kind}" for n, node in lab.nodes.items())
        out(f"gpuops lab up in {time.monotonic() - started:.1f}s: nodes {kinds}, pve7 unreachable; "
            f"Slack stand-in {lab.standin.base_url}; app {lab.app_url}")
        if script:
            for command, before in SCRIPT:
                if before is not None:
                    before(lab)
                command = command.format(model=container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B"))
                if command.startswith("click "):
                    out(await _clicked(lab, command.removeprefix("click ")) + "\n")
                    continue
                name, _, text = command.partition(" ")
                status, ack, calls = await lab.slash(name, text)
                out(transcript(command, status, ack, calls) + "\n")
            from bot.lab.demo import play, seed_steps

            out("--- the seed bring-up, on the same lab ---")
            out("(the lab's SGLang stand-in writes real recorded log lines: a Qwen3.5-27B AWQ startup and real error "
                "lines, see bot/lab/data/SOURCE.md; no BF16 Qwen3.6-27B log on A6000s is public, so the figures it "
                "logs are that run's, and the launch card says so)")
            model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
            ok = await play(seed_steps(model), lab, out)
            out(f"\nseed arc: {'all steps happened as scripted' if ok else 'a step did not happen'}")
            return 0 if ok else 1
        model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
        out("Type a slash command (e.g. `/gpu status`), `@gpuops <words>` in the thread of the latest launch (e.g. "
            "`@gpuops hypothesis leftover GPU memory`), `click <words>` on the latest button whose text has them (e.g. "
            "`click confirm`), a terminal command (e.g. `gpuops history`; `gpuops stop` and "
            "`gpuops free` act here only with --yes), or `quit`. What the bot says later (a launch's progress, its "
            "thread) is printed as it arrives.\n"
            f"Container 129's model is at\n  {model}\n"
            f"  e.g. /sglang budget sglang-a6000 {model} --tp 2 --mem-fraction-static 0.85")
        typed = TypedLines()
        feed = SlackFeed(lab.standin, out)
        answering = asyncio.Event()  # a typed command is being answered: the feed waits, its answer comes first
        feeding = asyncio.create_task(feed.run(answering))
        try:
            while True:
                line = await typed.next()
                if line is None or line.strip() in ("quit", "exit"):
                    return 0
                answering.set()
                try:
                    await _answer(lab, feed, line.strip(), out)
                finally:
                    answering.clear()
        finally:
            feeding.cancel()
    finally:
        # what the app still runs for a request (a pre-flight, a launch it follows) ends first: a launch cut short
        # after its server started leaves that server to the nodes' stop, and nothing writes to Redis or starts a
        # server once the lab's parts are gone
        with cleaning_up():
            await _cancel_others()
            await lab.stop()
            with suppress(OSError):
                shutil.rmtree(workdir)


async def _answer(lab: Lab, feed: SlackFeed, line: str, out: Callable[[str], None]) -> None:
    """One typed line answered: a slash command (its acknowledgement and first answer; what follows, the feed
    prints), `@gpuops <words>` in the thread of the latest launch, `click <words>` on the latest button whose text has
    them, or a terminal command (then the bot's next scheduler tick, which brings what it changed to the incident
    threads)."""
    feed.flush()  # what arrived while the line was typed
    if line.startswith("gpuops"):
        try:
            args = shlex.split(line)[1:]
        except ValueError as exc:
            out(f"cannot read that line: {exc}")
            return
        status, text = await lab.terminal(args)
        out(f"$ {line}\n{text}\n(exit {status})\n")
        if await lab.next_tick():
            out("(the bot's scheduler, on its next tick: `gpuops serve` runs one every 30 s)")
            feed.flush()
        return
    if line.startswith("@gpuops"):
        latest = await lab.latest_thread()
        if latest is None or latest.thread_ts is None:
            out("`@gpuops` speaks in the thread of the latest launch, and none was made yet: try /sglang launch")
            return
        out(f"> {line}   (in the thread of launch {latest.id})")
        status = await lab.mention_answered(line.removeprefix("@gpuops").strip(), latest.thread_ts)
        out(f"  (HTTP {status})")
        feed.flush()
        return
    if line.startswith("click"):
        words = line.removeprefix("click").strip()
        button = lab.button(words) if words else None
        if button is None:
            out(f"no button reading {words!r} was posted (buttons show as [text]; `click <words of its text>`)")
            return
        label, action_id, value = button
        out(f"> click [{label}]")
        before = len(lab.standin.calls)
        status, _ = await lab.click(action_id, value)
        out(f"  (HTTP {status})")
        with suppress(TimeoutError):  # its first answer; what follows, the feed prints
            await lab.standin.wait_for(lambda calls: any(c.delivered and c.method in SAID for c in calls[before:]),
                                       timeout_s=30)
        feed.flush()
        return
    if not line.startswith("/"):
        out("commands start with / (Slack), @gpuops (the thread of the latest launch), click (a button) or gpuops "
            "(terminal), e.g. /gpu status")
        return
    name, _, text = line.partition(" ")
    before = len(lab.standin.calls)
    status, ack, calls = await lab.slash(name, text)
    out(transcript(line, status, ack, calls) + "\n")
    feed.shown(before + len(calls))


class TypedLines:
    """The lines typed into the console, read from file descriptor 0 by a daemon thread.

    Not with ``input()``: a lab stopped at its prompt (Ctrl-C, SIGTERM) would then wait for the next Enter (in
    asyncio's executor), or, read in a daemon thread, abort at the interpreter's exit on the lock that thread holds on
    ``sys.stdin``'s buffer. A thread blocked in ``os.read`` holds no lock of Python's.
    """

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.pending = b""

    def _read(self) -> str | None:
        while b"\n" not in self.pending:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                line, self.pending = self.pending, b""
                return line.decode(errors="replace") if line else None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace")

    async def next(self, prompt: str = PROMPT) -> str | None:
        """The next line, after the prompt; None at the end of input or when nothing can show the prompt."""
        try:
            sys.stdout.write(prompt)
            sys.stdout.flush()
        except OSError:  # stdout is a pipe whose reader is gone
            return None
        loop = asyncio.get_running_loop()
        typed: asyncio.Future[str | None] = loop.create_future()

        def deliver(line: str | None) -> None:
            if not typed.done():
                typed.set_result(line)

        def read() -> None:
            try:
                line = self._read()
            except OSError:
                line = None
            with suppress(RuntimeError):  # the loop closed while this thread waited for input
                loop.call_soon_threadsafe(deliver, line)

        threading.Thread(target=read, name="gpuops-lab-input", daemon=True).start()
        return await typed


if __name__ == "__main__":
    from bot.cli import main

    sys.exit(main(["lab", *sys.argv[1:]]))
