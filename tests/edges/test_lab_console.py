"""`gpuops lab` typed into as a person would: what the bot says later is printed as it arrives, `@gpuops` speaks in
the latest launch's thread, a terminal's word reaches that thread on the bot's next tick, and a button is clicked by
the words of its text."""

import re

from tests.edges.test_lab_signals import start


def test_a_launch_its_thread_a_terminals_word_and_a_click_are_followed_in_the_console(tmp_path):
    console, workdir, model = start(tmp_path)
    try:
        console.type("@gpuops hypothesis too early")
        console.wait_for(r"`@gpuops` speaks in the thread of the latest launch, and none was made yet")
        console.type(f"/sglang launch sglang-a6000 {model} --tp 2 --context-length 32768 --mem-fraction-static 0.88 "
                     "--mamba-ssm-dtype bfloat16")
        console.wait_for(r"Pre-flight passed")
        # printed as they arrive, with nothing typed: the launch card, its edits, the result in its thread
        launch = console.wait_for(r"\*Launch `(a[0-9-]+-[0-9a-f]+)`\* on pve5:129").group(1)
        console.wait_for(r"^\[Slack, edited\]$")
        console.wait_for(rf"^\[ok\] \*Launch `{launch}`\* on pve5:129 \(sglang-a6000\) — \*ready\*")
        thread = console.wait_for(r"^\[Slack, in thread (\d+\.\d+)\]$").group(1)
        console.wait_for(rf"^Attempt `{launch}` ready: healthy")

        console.type("@gpuops hypothesis leftover GPU memory")
        console.wait_for(rf"> @gpuops hypothesis leftover GPU memory   \(in the thread of launch {launch}\)")
        console.wait_for(r"^Recorded \*H1\*: leftover GPU memory$")
        console.wait_for(r"^:grey_question: \*H1\* leftover GPU memory \(<@U0ALICE>\)$")

        console.type("gpuops incident sglang-a6000 refute H1 the GPUs were clean before the launch")
        console.wait_for(rf"^Recorded in thread {re.escape(thread)} .*: H1 refuted: the GPUs were clean")
        console.wait_for(r"^\(exit 0\)")
        console.wait_for(r"^\(the bot's scheduler, on its next tick")
        said = console.wait_for(r"^:keyboard: (cli:\S+), from a terminal: \*H1\* refuted: the GPUs were clean")
        console.wait_for(r"^\[Slack, edited\]$|^\[Slack, edited: :pushpin: \*Incident summary\*")
        console.wait_for(rf"\*H1\* leftover GPU memory \(<@U0ALICE>\) — refuted by {said.group(1)}: the GPUs were "
                         "clean")

        console.type("/sglang stop sglang-a6000")  # a confirmation, clicked in the console by its button's words
        console.wait_for(r"^\[Confirm\]  \[Cancel\]$")
        console.type("click nothing like it")
        console.wait_for(r"no button reading 'nothing like it' was posted")
        console.type("click CONFIRM")
        console.wait_for(r"> click \[Confirm\]$")
        console.wait_for(rf"Stopped attempt `{launch}` on pve5:129 \(sglang-a6000\) \(SIGTERM\); memory returned")
        console.type("quit")
        assert console.exit_status() == 0
    finally:
        console.close(workdir)
