"""`gpuops demo --script seed`: the seed story's bring-up, played through the real app.

Every step is a signed slash command or button click sent to the real Bolt app; the bot reads
the lab node over real SSH and keeps its state in Redis. Each step names what must show up in
what the bot posts; the demo prints the transcript and exits non-zero on the first step that
does not happen as scripted.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from bot.lab.console import Lab
from bot.lab.nodes import container_path
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
        Step("Hypothesis: leftover memory. The status says the GPUs are clean (seed steps 2-5)",
             "/gpu status pve5", ("compute processes: none",), until="GPU status:"),
        Step("Launch 2, same flags on clean GPUs: it dies with a sigquit; the first error is named, not the echo",
             launch + " --force", ("*failed*", "first error: `RuntimeError: Not enough memory"),
             user="U0ADMIN", scenario=["sigquit_after_oom"], until="*failed*"),
        Step("Click the computed remedy from launch 1's pre-flight", None, ("*ready*",), click="--mamba-ssm-dtype",
             scenario=["ready"], until="*ready*"),
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
    for number, step in enumerate(steps, 1):
        if step.scenario:
            node.set_scenario(129, step.scenario, delay_s=0.05)
        before = len(lab.standin.calls)
        out(f"\n=== {number}. {step.title}")
        if step.command:
            name, _, text = step.command.partition(" ")
            out(f"> {step.command}" if len(step.command) < 160 else f"> {step.command[:157]}...")
            status, ack, _ = await lab.slash(name, text, user_id=step.user)
            out(f"  (HTTP {status}) {ack}")
        else:
            target = _find_button(lab.standin.calls, step.click or "")
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
        out(blocks_to_text(final.blocks) or str(final.params.get("text", "")))
        everything = "\n".join(_text(c) for c in seen)
        missing = [e for e in step.expect if e not in everything]
        if missing:
            out(f"FAILED: expected {missing}")
            return False
    return True


def _find_button(calls: list[Call], fragment: str) -> tuple[str, str, str] | None:
    for call in reversed(calls):
        for block in call.blocks:
            if block.get("type") != "actions":
                continue
            for element in block.get("elements", []):
                label = element.get("text", {}).get("text", "")
                if fragment in label:
                    return label, element["action_id"], element["value"]
    return None


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
        await lab.stop()
        with suppress(OSError):
            shutil.rmtree(workdir)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(run_demo("seed")))
