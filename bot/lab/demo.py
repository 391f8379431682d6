"""`gpuops demo --script seed`: the seed story's bring-up, played through the real app.

Every step is a signed slash command, button click or `@gpuops` mention (an Events API delivery
in the first failed launch's thread, where the incident lives) sent to the real Bolt app; the bot reads
the lab node over real SSH and keeps its state in Redis. Each step names what must show up in
what the bot posts; the demo prints the transcript and exits non-zero on the first step that
does not happen as scripted.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from bot.lab.console import Lab
from bot.lab.nodes import container_path
from bot.signals import cleaning_up
from bot.slack_standin import Call
from bot.views import blocks_to_text

SEED_FLAGS = ("--tp 2 --context-length 65536 --enable-torch-compile --speculative-algorithm NEXTN "
              "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
              "--mamba-full-memory-ratio 0.5")


@dataclass
class Step:
    title: str
    command: str | None  # "/cmd text", or None for a click
    expect: tuple[str, ...]
    user: str = "U0ALICE"
    scenario: list[str] = field(default_factory=list)
    click: str | None = None  # a button label fragment to click in an earlier message
    until: str = ""  # wait until a delivered message contains this
    # no action: what the bot posts by itself after the previous step (looked for from that step's start)
    follows: bool = False
    mention: str | None = None  # `@gpuops <mention>` in the incident thread (the first forced launch's thread)


def seed_steps(model: str) -> list[Step]:
    launch = f"/sglang launch sglang-a6000 {model} {SEED_FLAGS} --mem-fraction-static 0.85"
    return [
        Step("Are the GPUs free? (structured nvidia-smi, processes read on the node)", "/gpu status sglang-a6000",
             ("processes of CT 129 (read on node pve5): none", "RTX A6000"), until="GPU status:"),
        Step("Launch 1 as on the real evening: TP=2, 64K, torch compile, MTP, 0.85", launch,
             ("Pre-flight refused the launch", "Not enough memory", "launch with --mamba-ssm-dtype bfloat16"),
             until="Pre-flight refused"),
        Step("An admin forces it anyway, to see SGLang fail for real (seed step 1)", launch + " --force",
             ("*failed*", "first error: `RuntimeError: Not enough memory"), user="U0ADMIN",
             scenario=["kv_pool_oom"], until="*failed*"),
        Step("In the launch's thread, the team records its hypothesis: leftover memory (seed step 2)", None,
             ("Incident summary", "*H1* leftover GPU memory from an earlier run"),
             mention="hypothesis leftover GPU memory from an earlier run", until="Incident summary"),
        Step("It is tested, not argued: a status snapshot in the thread says the GPUs are clean (seed steps 4-5)",
             None, ("compute processes: none",), mention="status", until="GPUs clean"),
        Step("No `pkill -9 -f python3` (seed step 3): /gpu free lists by PID what holds GPU memory - nothing here",
             "/gpu free sglang-a6000", ("No process holds GPU memory on pve5:129",), user="U0ADMIN",
             until="No process holds GPU memory"),
        Step("Launch 2, same flags on clean GPUs: it dies with a sigquit; the first error is named, not the echo",
             launch + " --force", ("*failed*", "first error: `RuntimeError: Not enough memory"),
             user="U0ADMIN", scenario=["sigquit_after_oom"], until="*failed*"),
        Step("Nobody types: the failure updates the thread's summary, and H1 is refuted by the evidence (seed 5)",
             None, ("refuted by gpuops: the GPUs were clean", "and the failure repeated in"), follows=True,
             until="refuted by gpuops"),
        Step("Its own log, not the old file read as new (seed step 2): the failed attempt's last lines, and when "
             "they were written", "/sglang log sglang-a6000 4",
             ("Log of `", "(failed)", "last written", "RuntimeError: Not enough memory", "Received sigquit"),
             until="Log of"),
        Step("Triage in the thread: the first cause, the sigquit as its echo, the hypothesis it proposes (seed 6)",
             None, ("*kv_pool_oom*", "Also in the log, not the cause: child_process_died",
                    "the first cause is kv_pool_oom"), mention="triage", until="*H2* the first cause is kv_pool_oom"),
        Step("Click the computed remedy (seed step 7: a flag computed, not guessed)", None, ("*ready*",),
             click="--mamba-ssm-dtype", scenario=["ready"], until="*ready*"),
        Step("Nobody types: the server came up, and the thread's summary confirms H2 by the change that started",
             None, ("*H2* the first cause is kv_pool_oom", "(a budget change) started",
                    "*H1* leftover GPU memory from an earlier run"), follows=True, until="confirmed by gpuops"),
        Step("The thread's own history: every attempt, hypothesis, test and note, in order", None,
             ("Attempts on pve5:129", "+ --mamba-ssm-dtype bfloat16", "*H1* raised by", "*H2* confirmed by gpuops"),
             mention="history", until="History of this thread"),
        Step("What was tried, in order", "/sglang history sglang-a6000",
             ("refused by pre-flight", "RuntimeError: Not enough memory", "ready", "+ --mamba-ssm-dtype bfloat16"),
             until="Attempts on"),
        Step("Stop it by its recorded process group, after a confirmation click", "/sglang stop sglang-a6000",
             ("Stop attempt",), until="Stop attempt"),
        Step("Confirm", None, ("Stopped attempt", "memory returned"), click="Confirm", until="Stopped attempt"),
    ]


def _text(call: Call) -> str:
    return blocks_to_text(call.blocks) + "\n" + str(call.params.get("text", ""))


async def play(steps: list[Step], lab: Lab, out: Callable[[str], None]) -> bool:
    node = lab.nodes["pve5"]
    before = 0
    for number, step in enumerate(steps, 1):
        if step.scenario:
            node.set_scenario(129, step.scenario, delay_s=0.05)
        if not step.follows:
            before = len(lab.standin.calls)
        out(f"\n=== {number}. {step.title}")
        thread = None
        if step.mention:
            thread = await _incident_thread(lab)
            if thread is None:
                out("FAILED: no failed launch with a thread to speak in")
                return False
            out(f"> @gpuops {step.mention}   (in the thread of the first failed launch, as {step.user})")
            status = await lab.mention(step.mention, thread, user_id=step.user)
            out(f"  (HTTP {status})")
        elif step.follows:
            out("  (no one types anything)")
        elif step.command:
            name, _, text = step.command.partition(" ")
            out(f"> {step.command}" if len(step.command) < 160 else f"> {step.command[:157]}...")
            status, ack, _ = await lab.slash(name, text, user_id=step.user)
            out(f"  (HTTP {status}) {ack}")
        else:
            target = lab.button(step.click or "")
            if target is None:
                out(f"FAILED: no button matching {step.click!r} was posted")
                return False
            out(f"> click [{target[0]}] as {step.user}")
            await lab.click(target[1], target[2], user_id=step.user)
        def arrived(calls: list[Call], s: Step = step, b: int = before) -> bool:
            return any(c.delivered and s.until in _text(c) for c in calls[b:])

        try:
            await lab.standin.wait_for(arrived, 90)
        except TimeoutError:
            out(f"FAILED: nothing containing {step.until!r} arrived")
            return False
        seen = [c for c in lab.standin.calls[before:] if c.delivered and c.method in (
            "chat.postMessage", "chat.update", "response_url")]
        final = next((c for c in reversed(seen) if step.until in _text(c)), seen[-1])
        if step.mention:  # the replies to it first (a status table, a triage report), then the summary
            for reply in seen:
                said = str(reply.params.get("text", ""))  # a launch's own result note, posted late, is not a reply
                if (reply is not final and reply.method == "chat.postMessage"
                        and reply.params.get("thread_ts") == thread and "Incident summary" not in _text(reply)
                        and not said.startswith("Attempt `")):
                    out(blocks_to_text(reply.blocks) or str(reply.params.get("text", "")))
        out(blocks_to_text(final.blocks) or str(final.params.get("text", "")))
        everything = "\n".join(_text(c) for c in seen)
        missing = [e for e in step.expect if e not in everything]
        if missing:
            out(f"FAILED: expected {missing}")
            return False
    return True


async def _incident_thread(lab: Lab) -> str | None:
    """The thread of the first launch that ran and failed on the seed container: the incident's thread."""
    assert lab.services is not None
    attempts = await lab.services.attempts.recent("pve5", 129, 50)
    ran = [a for a in attempts if a.status.value == "failed" and a.pid and a.thread_ts]
    return min(ran, key=lambda a: a.created_at).thread_ts if ran else None


async def run_demo(script: str, out: Callable[[str], None] = print) -> int:
    if script != "seed":
        out(f"unknown script {script!r}; available: seed")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="gpuops-demo-"))
    lab = Lab(workdir)
    started = time.monotonic()
    try:
        await lab.start()
        model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
        ok = await play(seed_steps(model), lab, out)
        out(f"\nseed demo: {'all steps happened as scripted' if ok else 'a step did not happen'} "
            f"in {time.monotonic() - started:.1f}s")
        return 0 if ok else 1
    finally:
        with cleaning_up():
            await lab.stop()
            with suppress(OSError):
                shutil.rmtree(workdir)


if __name__ == "__main__":
    from bot.cli import main

    raise SystemExit(main(["demo"]))
