"""`gpuops launch` and `gpuops stop` in a terminal: their own processes, against the lab's nodes over real SSH and the
same Redis as the bot, so what a terminal launched is in the history the team reads in Slack."""

import asyncio
import re
import signal
import subprocess
import sys

import pytest

from bot.core.attempts import AttemptStatus
from bot.core.startup_log import STAGE_LABEL
from tests.conftest import ROOT
from tests.handlers.test_launch_flow import SEED, model, stored_once

FITS = f"{SEED} --mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16"  # the seed launch the budget lets start


def terminal_env(lab, tmp_path):
    return {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path),
            "GPUOPS_PROGRESS_POLL_S": "0.3"}


def terminal(lab, tmp_path, *args, answer="", inventory=None, settings=None):
    """``gpuops ARGS`` as a person runs it against the lab (or ``inventory``), ``answer`` typed at its prompt (then
    the input ends); ``settings``: more of its environment."""
    env = {**terminal_env(lab, tmp_path), **(settings or {})}
    command, *rest = args
    return asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", command, "--inventory",
                                              str(inventory or lab.workdir / "inventory.yml"), *rest],
                             input=answer, capture_output=True, text=True, cwd=ROOT, timeout=180, env=env)


async def test_a_terminal_launch_is_refused_then_launched_followed_and_stopped_only_after_a_yes(lab, tmp_path):
    path = model(lab)
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.1)

    refused = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", path, "--",
                             *SEED.split(), "--mem-fraction-static", "0.85")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "Pre-flight refused the launch" in refused.stdout and "Not enough memory" in refused.stdout
    nexts = refused.stdout.split("Next, each through the pre-flight again:")[1]
    assert f"  gpuops launch --container sglang-a6000 --model {path} -- " in nexts
    assert "--mamba-ssm-dtype bfloat16" in nexts
    assert lab.nodes["pve5"].launched_pids() == []

    launched = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", path, "--",
                              *FITS.split())
    assert launched.returncode == 0, launched.stdout + launched.stderr
    out = launched.stdout
    assert "Pre-flight passed" in out and "Started attempt a" in out
    # a line each time the server's own log reaches a further stage (as many as the polls saw; within a stage, how
    # far it got), then the card
    seen = [re.sub(r" (\d+%|\(.*\))$", "", s) for s in re.findall(r"^ +\d+s  (.+)$", out, re.MULTILINE)]
    order = list(STAGE_LABEL.values())
    assert seen[-1] == "ready" and [order.index(s) for s in seen] == sorted(order.index(s) for s in seen), seen
    assert out.index("  ready\n") < out.index("*Launch `")
    assert "KV pool 422,310 tokens observed" in out and "healthy: /health 200" in out
    ready, first = await lab.services.attempts.recent("pve5", 129, 2)
    assert first.status is AttemptStatus.FAILED and first.transitions[-1].note == "refused by pre-flight"
    assert ready.status is AttemptStatus.READY and ready.user.startswith("cli:") and ready.channel == ""
    assert f"`gpuops stop {ready.id}` stops it." in out
    (pid,) = lab.nodes["pve5"].launched_pids()
    assert ready.pid == pid

    # nothing typed (the input ends): nothing is stopped
    kept = await terminal(lab, tmp_path, "stop", "sglang-a6000")
    assert kept.returncode == 3, kept.stdout + kept.stderr
    assert f"Stop attempt {ready.id} on pve5:129 (sglang-a6000)?" in kept.stdout
    assert f"SIGTERM to process group {pid}, SIGKILL after" in kept.stdout and "Nothing was done." in kept.stdout
    assert (await lab.services.attempts.get(ready.id)).status is AttemptStatus.READY
    assert lab.nodes["pve5"].launched_pids() == [pid]
    declined = await terminal(lab, tmp_path, "stop", ready.id, answer="n\n")
    assert declined.returncode == 3 and "Nothing was done." in declined.stdout

    stopped = await terminal(lab, tmp_path, "stop", ready.id, answer="y\n")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"Stopped attempt `{ready.id}` on pve5:129 (sglang-a6000) (SIGTERM); memory returned" in stopped.stdout
    after = await lab.services.attempts.get(ready.id)
    assert after.status is AttemptStatus.STOPPED and after.transitions[-1].note.startswith("stopped by cli:")
    assert lab.nodes["pve5"].launched_pids() == []
    nothing = await terminal(lab, tmp_path, "stop", "sglang-a6000")
    assert nothing.returncode == 2 and nothing.stderr == ("gpuops: no running attempt on pve5:129 (sglang-a6000) "
                                                          "(see `gpuops history sglang-a6000`)\n"), nothing.stderr
    audit = await lab.services.store.audit_entries(10)
    assert [(e["action"], e["result"].split(" ")[0]) for e in audit if e["user"].startswith("cli:")] == [
        ("sglang.stop", ":black_square_for_stop:"), ("sglang.launch", "started"), ("sglang.launch", "refused")]


async def test_a_forced_terminal_launch_that_fails_names_its_first_error_and_the_triage_to_run(lab, tmp_path):
    lab.nodes["pve5"].set_scenario(129, ["sigquit_after_oom"], delay_s=0.02)
    failed = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", model(lab), "--force",
                            "--", *SEED.split(), "--mem-fraction-static", "0.85")
    assert failed.returncode == 4, failed.stdout + failed.stderr
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert attempt.status is AttemptStatus.FAILED and attempt.forced
    assert "Pre-flight refused the launch" not in failed.stdout and "forced" in failed.stdout.lower()
    assert ":x: first error: `RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.`" \
        in failed.stdout
    assert f"`gpuops triage {attempt.id}` names the first cause" in failed.stdout


async def test_a_terminal_launch_given_up_on_as_hung_shows_where_its_processes_wait(lab, tmp_path):
    """No output for the stall timeout: the terminal says the launch failed as a hang, its server left running, and
    where each of its processes waits now (py-spy in the container): the stand-in's own frame."""
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    hung = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", model(lab), "--",
                          *FITS.split(), settings={"GPUOPS_STALL_TIMEOUT_S": "1.5"})
    assert hung.returncode == 4, hung.stdout + hung.stderr
    assert "a hang at loading weights" in hung.stdout and "was left running" in hung.stdout
    assert "Where its processes are now (py-spy, innermost frame first):" in hung.stdout
    assert re.search(r"\n  PID \d+ .*sglang\.launch_server.*\n    MainThread \(idle\): main \(\S*fake_sglang\.py:\d+\)",
                     hung.stdout), hung.stdout
    stopped = await terminal(lab, tmp_path, "stop", "sglang-a6000", "--yes")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert lab.nodes["pve5"].read_state()["processes"] == []


async def following_a_hang(lab, tmp_path, interrupt, *options: str) -> tuple[str, int, str]:
    """``gpuops launch [options]`` of a server that never gets ready, in its own process; once it follows the attempt,
    ``interrupt(process)``. Its attempt id, exit code and what it printed (stdout, then stderr)."""
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    process = subprocess.Popen([sys.executable, "-m", "bot.cli", "launch", "--inventory",
                                str(lab.workdir / "inventory.yml"), *options, "--container", "sglang-a6000", "--model",
                                model(lab), "--", *FITS.split()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, env=terminal_env(lab, tmp_path))
    told = process.stderr if "--json" in options else process.stdout  # where the person reads
    try:
        started = await asyncio.to_thread(_line_with, told, "Started attempt ")
        await asyncio.sleep(1.0)  # following: at least one read of the log
        interrupt(process)
        out, err = await asyncio.to_thread(process.communicate, None, 60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return started.split()[2].rstrip(":"), process.returncode, out + err


def _line_with(stream, needle: str) -> str:
    for line in stream:
        if needle in line:
            return line
    raise AssertionError(f"the command ended before printing {needle!r}")


async def test_ctrl_c_stops_following_a_terminal_launch_not_the_server_and_the_bot_can_take_it_over(lab, tmp_path):
    import signal

    attempt_id, code, printed = await following_a_hang(lab, tmp_path, lambda p: p.send_signal(signal.SIGINT))
    assert code == 130, printed
    assert '"outcome"' not in printed  # no JSON unless asked
    assert "Traceback" not in printed
    assert f"Stopped following attempt {attempt_id}; the server itself was not stopped." in printed
    attempt = await lab.services.attempts.get(attempt_id)
    assert attempt.status is AttemptStatus.LAUNCHING and lab.nodes["pve5"].launched_pids() == [attempt.pid]
    # its tracking lease was given back: a bot replica's next tick follows it from here, not 30 s later
    assert not await lab.services.store.redis.exists(f"gpuops:tracker:{attempt_id}")
    stopped = await terminal(lab, tmp_path, "stop", "--yes", attempt_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert (await lab.services.attempts.get(attempt_id)).status is AttemptStatus.STOPPED
    assert lab.nodes["pve5"].launched_pids() == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_terminal_launch_ended_by_sigterm_or_a_closed_terminal_lets_go_as_ctrl_c_does(lab, tmp_path, signum):
    """The SSH session to the jump host dropping (SIGHUP) or a `kill` ends the following, not the server; the lease
    is given back at once (killed outright, the command held it until it expired), and the exit says which signal."""
    attempt_id, code, printed = await following_a_hang(lab, tmp_path, lambda p: p.send_signal(signum))
    assert code == 128 + signum, printed
    assert "Traceback" not in printed
    assert f"Stopped following attempt {attempt_id}; the server itself was not stopped." in printed
    attempt = await lab.services.attempts.get(attempt_id)
    assert attempt.status is AttemptStatus.LAUNCHING and lab.nodes["pve5"].launched_pids() == [attempt.pid]
    assert not await lab.services.store.redis.exists(f"gpuops:tracker:{attempt_id}")


async def test_a_container_that_stops_while_a_terminal_follows_ends_the_launch_in_proxmoxs_words(lab, tmp_path):
    """The container stopping mid-launch (`pct exec` now dies with "CT 129 not running") ends its server: the launch
    is recorded failed with Proxmox's words said as they mean, and its container's launch lock is given back, where
    the record stayed `launching` and the lock held, each follower failing on it in turn."""
    node = lab.nodes["pve5"]

    def container_status(status):
        state = node.read_state()
        state["containers"]["129"]["status"] = status
        node.write_state(state)

    try:
        attempt_id, code, printed = await following_a_hang(lab, tmp_path, lambda p: container_status("stopped"))
        assert code == 4 and "Traceback" not in printed, printed
        attempt = await lab.services.attempts.get(attempt_id)
        assert attempt.status is AttemptStatus.FAILED
        assert re.fullmatch(r"the server ended with its container during [a-z ]+: container 129 on pve5 is not "
                            r"running, so nothing in it holds a GPU \(`pct start 129` on pve5 starts it; pct: CT 129 "
                            r"not running\)", attempt.error_line), attempt.error_line
        assert "container 129 on pve5 is not running" in printed
        assert await lab.services.attempts.lock_holder("pve5", 129) is None
    finally:
        container_status("running")
    # the lab's stand-in outlives its "stopped" container (a real one would not): stopped by its record here
    stopped = await terminal(lab, tmp_path, "stop", "--yes", attempt_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


async def test_a_terminal_free_stops_only_the_listed_loose_pids_after_a_yes_and_leaves_a_launch_to_stop(lab,
                                                                                                        tmp_path):
    import os

    from tests.handlers.test_scheduler import ready_server

    attempt = await ready_server(lab)
    node = lab.nodes["pve5"]
    stray = node.spawn_holder(0, "python3 train.py", 3000, 129)
    kept = await terminal(lab, tmp_path, "free", "sglang-a6000")
    assert kept.returncode == 3, kept.stdout + kept.stderr
    assert "Stop these 1 process(es) on pve5?" in kept.stdout
    assert f"  - PID {stray} on GPU 0 (CT 129): python3 train.py, 3000 MiB" in kept.stdout
    assert f"`gpuops stop {attempt.id}` stops its whole process group" in kept.stdout
    assert kept.stdout.rstrip().endswith("Nothing was done.")
    os.kill(stray, 0)  # alive: nobody typed y
    ended = asyncio.ensure_future(asyncio.to_thread(node._children[-1].wait, 60))  # how the stray ends
    freed = await terminal(lab, tmp_path, "free", "pve5", answer="y\n")
    assert freed.returncode == 0, freed.stdout + freed.stderr
    assert f"Stopped PIDs {stray} on pve5; memory returned: GPU 0:" in freed.stdout
    assert await ended == -15  # by the SIGTERM
    assert node.launched_pids() == [attempt.pid]  # the launch is not a loose process: left running
    (entry,) = [e for e in await lab.services.store.audit_entries(20) if e["action"] == "gpu.free"]
    assert entry["user"].startswith("cli:") and str(stray) in entry["result"]


async def test_a_terminal_free_of_memory_no_process_holds_names_the_leak_and_stops_nothing(lab, tmp_path):
    node = lab.nodes["pve5"]
    state = node.read_state()
    state["gpus"][1]["orphaned_mib"] = 12000
    node.write_state(state)
    answer = await terminal(lab, tmp_path, "free", "pve5", answer="y\n")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert answer.stdout == ("No process holds GPU memory on pve5.\nGPU 1: 12001 MiB held with no process listed\n"
                             "no process on pve5 holds a GPU open (NVIDIA's own services aside): that memory is a leak "
                             "only a driver reset or a reboot of the node frees\n")


async def test_a_launch_profile_of_the_inventory_is_the_whole_launch_in_a_terminal(lab, tmp_path):
    import yaml

    inventory = yaml.safe_load((lab.workdir / "inventory.yml").read_text())
    inventory["profiles"] = {"qwen36": {"container": "sglang-a6000", "model_path": model(lab),
                                        "flags": FITS.split()}}
    with_profile = tmp_path / "inventory.yml"
    with_profile.write_text(yaml.safe_dump(inventory))

    def gpuops(*args):
        return terminal(lab, tmp_path, *args, inventory=with_profile)

    checked = await gpuops("preflight", "--profile", "qwen36")
    assert checked.returncode == 3, checked.stdout + checked.stderr  # passed, with 0.5.9's warning
    assert "Pre-flight passed" in checked.stdout and "--mamba-ssm-dtype bfloat16 --port 30000`" in checked.stdout
    unknown = await gpuops("launch", "--profile", "qwen3")
    assert unknown.returncode == 2 and "no launch profile `qwen3` (profiles: qwen36)" in unknown.stderr
    both = await gpuops("launch", "--profile", "qwen36", "--container", "sglang-a6000")
    assert both.returncode == 2 and "--profile is the whole launch" in both.stderr
    neither = await gpuops("launch", "--model", model(lab))
    assert neither.returncode == 2 and "give --container and --model" in neither.stderr
    assert await lab.services.attempts.recent("pve5", 129, 5) == [] and lab.nodes["pve5"].launched_pids() == []


async def test_the_labs_terminal_answers_a_stop_no_at_once_and_stops_with_yes(lab):
    """In `gpuops lab`, a terminal command has no input of its own: its question is answered no at once, and the
    console keeps its lines; --yes stops the server."""
    import os

    from tests.handlers.test_scheduler import ready_server

    attempt = await ready_server(lab)
    # the console's input, as the lab's stdin would be: open, nothing typed yet (a command that read it would wait)
    typed, kept = os.pipe()
    console = os.dup(0)
    os.dup2(typed, 0)
    try:
        status, text = await asyncio.wait_for(lab.terminal(["stop", "sglang-a6000"]), 60)
    finally:
        os.dup2(console, 0)
        for fd in (typed, kept, console):
            os.close(fd)
    assert status == 3 and text.endswith("Type y to stop it: \nNothing was done."), text
    # the lab's terminal has the lab's settings, as the bot beside it does: the same grace before SIGKILL
    assert f"SIGKILL after {lab.services.settings.stop_timeout_s:g}s" in text, text
    assert lab.nodes["pve5"].launched_pids() == [attempt.pid]
    status, text = await lab.terminal(["stop", "--yes", attempt.id])
    assert status == 0 and f"Stopped attempt `{attempt.id}`" in text, text
    assert lab.nodes["pve5"].launched_pids() == []


async def test_a_terminal_launch_with_json_prints_one_document_and_tells_the_person_on_stderr(lab, tmp_path):
    """`gpuops launch --json` for a script: stdout is exactly one JSON document at the end (the outcome, the attempt's
    record, the pre-flight, the last progress); the checklist and the progress lines go to stderr."""
    import json

    path = model(lab)
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.1)
    refused = await terminal(lab, tmp_path, "launch", "--json", "--container", "sglang-a6000", "--model", path, "--",
                             *SEED.split(), "--mem-fraction-static", "0.85")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    doc = json.loads(refused.stdout)
    assert doc["outcome"] == "refused" and doc["attempt"]["status"] == "failed"
    assert doc["preflight"]["passed"] is False and doc["preflight"]["remedies"]
    assert any(c["result"] == "fail" and "Not enough memory" in c["detail"] for c in doc["preflight"]["checks"])
    assert doc["preflight"]["next"][0].startswith(f"gpuops launch --container sglang-a6000 --model {path} -- ")
    assert "Pre-flight refused the launch" in refused.stderr and "Next, each through" in refused.stderr

    launched = await terminal(lab, tmp_path, "launch", "--json", "--container", "sglang-a6000", "--model", path, "--",
                              *FITS.split())
    assert launched.returncode == 0, launched.stdout + launched.stderr
    doc = json.loads(launched.stdout)
    (pid,) = lab.nodes["pve5"].launched_pids()
    assert doc["outcome"] == "ready" and doc["attempt"]["status"] == "ready" and doc["attempt"]["pid"] == pid
    assert doc["preflight"]["passed"] is True and doc["preflight"]["next"] == []
    assert doc["progress"]["stage"] == "ready" and doc["progress"]["kv_tokens"] == 422310
    assert "Started attempt " in launched.stderr and "  ready\n" in launched.stderr
    assert (await lab.services.attempts.get(doc["attempt"]["id"])).status is AttemptStatus.READY
    stopped = await terminal(lab, tmp_path, "stop", "--yes", doc["attempt"]["id"])
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


async def test_ctrl_c_during_a_json_launch_names_the_attempt_it_stopped_following(lab, tmp_path):
    import json
    import signal

    attempt_id, code, printed = await following_a_hang(lab, tmp_path, lambda p: p.send_signal(signal.SIGINT),
                                                       "--json")
    assert code == 130, printed
    document, told = printed.split("\n}\n", 1)
    assert json.loads(document + "}") == {"outcome": "not followed", "attempt_id": attempt_id}
    assert f"Stopped following attempt {attempt_id}; the server itself was not stopped." in told
    stopped = await terminal(lab, tmp_path, "stop", "--yes", attempt_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


async def test_a_launch_stopped_while_its_server_starts_records_that_server_to_be_followed_and_stopped(lab, tmp_path):
    """SIGTERM after the server started but before the container's answer (its PID) came back: the command waits
    for that answer, so the server is on record as launching with its PID (a bot takes it over; `gpuops stop`
    stops it), not running unknown beside an attempt left `planned` and its container locked."""
    import signal

    node = lab.nodes["pve5"]
    node.set_scenario(129, ["hang"], delay_s=0.02)
    state = node.read_state()
    state["containers"]["129"]["launch_return_delay_s"] = 3
    node.write_state(state)
    process = subprocess.Popen([sys.executable, "-m", "bot.cli", "launch", "--inventory",
                                str(lab.workdir / "inventory.yml"), "--container", "sglang-a6000", "--model",
                                model(lab), "--", *FITS.split()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, env=terminal_env(lab, tmp_path))
    try:
        for _ in range(600):  # the server runs; its start's answer has not come back
            if node.launched_pids():
                break
            await asyncio.sleep(0.05)
        assert node.launched_pids(), "the launch did not start its server"
        (planned,) = await lab.services.attempts.recent("pve5", 129, 1)
        assert planned.status is AttemptStatus.PLANNED and planned.pid is None
        process.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(process.communicate, None, 60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, out + err
    assert f"Stopped following attempt {planned.id}; the server itself was not stopped." in err
    attempt = await lab.services.attempts.get(planned.id)
    assert attempt.status is AttemptStatus.LAUNCHING and node.launched_pids() == [attempt.pid]
    assert "the command that started it was stopped meanwhile" in attempt.transitions[-1].note
    assert await lab.services.attempts.lock_holder("pve5", 129) == planned.id  # a launch in progress holds it
    stopped = await terminal(lab, tmp_path, "stop", "--yes", planned.id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert node.launched_pids() == [] and await lab.services.attempts.lock_holder("pve5", 129) is None


async def test_a_slack_launch_stopped_from_a_terminal_has_its_card_say_stopped_on_the_bots_next_tick(lab, tmp_path):
    """A terminal has no Slack: its stop leaves the launch card to the bot, which draws it again from the record
    once (not on every later change of the container)."""
    from bot.scheduler import Scheduler
    from bot.views import blocks_to_text
    from tests.handlers.test_launch_flow import wait_text

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS}")
    await wait_text(lab, "*ready*")
    (ready,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert ready.status is AttemptStatus.READY and ready.message_ts

    def card_edits():
        return [blocks_to_text(c.blocks) for c in lab.standin.calls
                if c.method == "chat.update" and c.params.get("ts") == ready.message_ts]

    before = len(card_edits())
    stopped = await terminal(lab, tmp_path, "stop", "--yes", ready.id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert len(card_edits()) == before  # the terminal itself has no Slack
    scheduler = Scheduler(lab.services, lab.app.client)
    await scheduler.tick()
    edits = card_edits()[before:]
    assert len(edits) == 1 and f"Launch `{ready.id}`* on pve5:129 (sglang-a6000) — *stopped*" in edits[0], edits
    assert f"KV pool {ready.observed['kv_tokens']:,} tokens observed" in edits[0]
    assert "stopped by cli:" in edits[0] and "(SIGTERM)" in edits[0]  # a terminal's login, as written
    await lab.services.attempts.mark_changed("pve5", 129)  # the container changes again: the card is not redrawn
    await scheduler.tick()
    assert len(card_edits()) == before + 1


async def test_a_terminal_launch_given_up_on_is_watched_on_by_the_bot_which_records_it_ready(lab, tmp_path):
    """The terminal gives up on a launch silent past the stall timeout and ends (exit 4); its server, left running,
    comes up after all. The bot's next tick takes over the watch the terminal left, and records it ready."""
    from bot.scheduler import Scheduler

    lab.nodes["pve5"].set_scenario(129, ["slow_load"], delay_s=0.02, pause_s=5)
    given_up = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", model(lab), "--",
                              *FITS.split(), settings={"GPUOPS_STALL_TIMEOUT_S": "1.5"})
    assert given_up.returncode == 4, given_up.stdout + given_up.stderr
    assert "a hang at loading weights" in given_up.stdout
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert attempt.status is AttemptStatus.FAILED and attempt.left_running
    result = await Scheduler(lab.services, lab.app.client).tick()
    assert result.taken_over == [attempt.id]
    stored = await stored_once(lab, attempt, lambda record: record.status is AttemptStatus.READY)
    assert stored.status is AttemptStatus.READY, stored.transitions
    assert stored.transitions[-1].note.startswith("came up ")
    assert "should it come up after all, it is recorded ready" in given_up.stdout
    stopped = await terminal(lab, tmp_path, "stop", "sglang-a6000", "--yes")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
