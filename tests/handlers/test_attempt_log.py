"""/sglang log, `@gpuops log` and `gpuops log`: the last lines of an attempt's own log, read in its container over
real SSH, through the real app."""

import asyncio
import os
from pathlib import Path

from bot.core.flags import scrub_secrets
from bot.views import blocks_to_text
from tests.handlers.test_launch_flow import post_with, wait_text
from tests.handlers.test_triage import failed_launch


def file_lines(attempt) -> list[str]:
    """The attempt's log as its container holds it, one entry a line (the launcher ends each with a newline)."""
    text = Path(attempt.log_path).read_text()
    assert text.endswith("\n")
    return text[:-1].split("\n")


def numbered(lines: list[str], first: int) -> list[str]:
    return [f"{n:>6}  {scrub_secrets(line)}" for n, line in enumerate(lines, first)]


async def test_sglang_log_shows_the_last_lines_numbered_as_in_the_file_and_never_the_key(lab):
    secret = "sk-lab-" + os.urandom(6).hex()
    attempt = await failed_launch(lab, "sigquit_after_oom", flags=f"--mem-fraction-static 0.85 --api-key {secret}")
    lines = file_lines(attempt)
    assert any(secret in line for line in lines)  # SGLang's ServerArgs line prints it, as the real one does

    await lab.slash("/sglang", f"log {attempt.id} 200", user_id="U0EVE")  # a viewer may read it
    text = blocks_to_text(post_with(await wait_text(lab, "Log of", method="chat.postMessage"), "Log of").blocks)
    assert f"*Log of `{attempt.id}`* on pve5:129 (sglang-a6000) (failed) — lines 1–{len(lines)} of {len(lines)}" \
        in text
    assert "\n".join(numbered(lines, 1)) in text  # every line, in order, numbered as in the file
    assert secret not in text and "api_key=<redacted>" in text
    assert f"`/sglang triage {attempt.id}` reads it whole" in text and attempt.log_path in text

    # by container, a few lines: the latest attempt's last ones
    before = len(lab.standin.calls)
    await lab.slash("/sglang", "log sglang-a6000 5")
    calls = await lab.standin.wait_for(lambda cs: any("Log of" in blocks_to_text(c.blocks) for c in cs[before:]
                                                      if c.method == "chat.postMessage"), 30)
    text = blocks_to_text(post_with(calls[before:], "Log of").blocks)
    first = len(lines) - 4
    assert f"lines {first}–{len(lines)} of {len(lines)}" in text
    assert "\n".join(numbered(lines[-5:], first)) in text and f"{first - 1:>6}  " not in text


async def test_gpuops_log_in_the_launchs_thread_and_in_a_terminal(lab, tmp_path):
    from tests.edges.test_cli import gpuops

    attempt = await failed_launch(lab, "kv_pool_oom")
    lines = file_lines(attempt)
    # in the launch's thread, the thread's container is the one read
    assert await lab.mention("log 3", attempt.thread_ts) == 200
    calls = await wait_text(lab, "Log of", method="chat.postMessage")
    answer = post_with(calls, "Log of")
    assert answer.params.get("thread_ts") == attempt.thread_ts
    assert "\n".join(numbered(lines[-3:], len(lines) - 2)) in blocks_to_text(answer.blocks)

    inventory = str(lab.workdir / "inventory.yml")
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path)}
    done = await asyncio.to_thread(gpuops, "log", "sglang-a6000", "-n", "4", "--inventory", inventory, env=env)
    assert done.returncode == 0, done.stderr
    assert f"Log of `{attempt.id}`" in done.stdout and "\n".join(numbered(lines[-4:], len(lines) - 3)) in done.stdout
    too_many = await asyncio.to_thread(gpuops, "log", attempt.id, "-n", "1000", "--inventory", inventory, env=env)
    assert too_many.returncode == 2 and "from 1 to 200 lines" in too_many.stderr

    # a log that is gone (rotated away by hand) is said to be unreadable, not shown as empty
    Path(attempt.log_path).unlink()
    gone = await asyncio.to_thread(gpuops, "log", attempt.id, "--inventory", inventory, env=env)
    assert gone.returncode == 3 and f"{attempt.log_path} could not be read in CT 129" in gone.stdout
