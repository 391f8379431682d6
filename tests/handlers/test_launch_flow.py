"""/sglang launch, stop, history and /gpu free through signed requests, real SSH, Redis and the stand-in."""

import asyncio
import os
import re

import pytest

from bot import views
from bot.core.attempts import AttemptStatus
from bot.lab.nodes import container_path
from bot.views import blocks_to_text

SEED = ("--tp 2 --context-length 65536 --enable-torch-compile --speculative-algorithm NEXTN "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
        "--mamba-full-memory-ratio 0.5")


def model(lab):
    return container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")


def posts(calls, method="chat.postMessage"):
    return [c for c in calls if c.method == method and c.delivered]


def post_with(calls, needle):
    return next(c for c in reversed(posts(calls)) if needle in blocks_to_text(c.blocks))


def buttons(call):
    return [e for b in call.blocks if b["type"] == "actions" for e in b["elements"]]


async def wait_text(lab, needle, method="chat.update", timeout=60):
    calls = await lab.standin.wait_for(
        lambda cs: any(c.method == method and needle in (blocks_to_text(c.blocks) + str(c.params.get("text", "")))
                       for c in cs), timeout)
    return calls


async def test_refused_preflight_offers_remedies_and_a_click_launches_the_change(lab):
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    text = f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85"
    status, ack, calls = await lab.slash("/sglang", text)
    assert status == 200 and ack == "running the pre-flight on pve5:129 (sglang-a6000)…"
    refusal = post_with(calls, "Pre-flight refused")
    text = blocks_to_text(refusal.blocks)
    assert "Pre-flight refused the launch" in text and "Not enough memory" in text and "GPUs clean" in text
    choice = next(b for b in buttons(refusal) if "--mamba-ssm-dtype bfloat16" in b["text"]["text"])
    status, _ = await lab.click(choice["action_id"], choice["value"])
    assert status == 200
    calls = await wait_text(lab, "*ready*")
    progress = [c for c in calls if c.method == "chat.update"]
    assert any("*ready*" in blocks_to_text(c.blocks) for c in progress)
    await lab.standin.wait_for(lambda cs: any(c.method == "chat.postMessage" and "thread_ts" in c.params
                                              and "observed" in str(c.params.get("text")) for c in cs), 20)
    await lab.slash("/sglang", "history sglang-a6000")
    calls = await wait_text(lab, "Attempts on", method="chat.postMessage")
    history = blocks_to_text(post_with(calls, "Attempts on").blocks)
    assert "refused by pre-flight" in history and "ready" in history and "+ --mamba-ssm-dtype bfloat16" in history
    # the same button twice does nothing
    status, calls = await lab.click(choice["action_id"], choice["value"])
    await lab.standin.wait_for(lambda cs: any("expired or was already used" in str(c.params.get("text"))
                                              for c in cs if c.method == "response_url"), 10)


async def test_a_remedy_button_a_viewer_clicks_stays_for_an_operator(lab):
    """A viewer's click on a remedy launch does nothing, and leaves the button to an operator (it is not used up)."""
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85")
    refusal = post_with(calls, "Pre-flight refused")
    choice = next(b for b in buttons(refusal) if "--mamba-ssm-dtype bfloat16" in b["text"]["text"])
    await lab.click(choice["action_id"], choice["value"], user_id="U0EVE")
    await lab.standin.wait_for(lambda cs: any("needs the operator role" in str(c.params.get("text")) for c in cs), 10)
    assert all(a.pid is None for a in await lab.services.attempts.recent("pve5", 129, 5))  # nothing launched
    await lab.click(choice["action_id"], choice["value"], user_id="U0ALICE")
    await wait_text(lab, "*ready*")


async def test_forced_launch_fails_with_its_first_error_line_and_progress_edits(lab):
    lab.nodes["pve5"].set_scenario(129, ["sigquit_after_oom"], delay_s=0.05)
    _, ack, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                                               "--force", user_id="U0ADMIN")
    calls = await wait_text(lab, "*failed*")
    final = [c for c in calls if c.method == "chat.update"][-1]
    text = blocks_to_text(final.blocks)
    assert "RuntimeError: Not enough memory" in text and "sigquit" not in text.split("first error")[1].split("\n")[0]
    assert "/sglang triage" in text
    preflight = blocks_to_text(post_with(calls, "Pre-flight failed").blocks)
    assert "launching anyway (--force)" in preflight
    assert "(forced past a failed pre-flight)" in text  # the card, and so the history, say it was forced
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert attempt.forced and "(forced past a failed pre-flight)" in blocks_to_text(
        views.history_message([attempt], "pve5:129").blocks)


async def test_force_needs_admin_and_viewers_cannot_launch(lab):
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --force", user_id="U0ALICE")
    calls = await lab.standin.wait_for(lambda cs: any(c.method == "response_url" for c in cs), 10)
    assert "`sglang.launch.force` needs the admin role; you have operator" in \
        [c for c in calls if c.method == "response_url"][-1].params["text"]
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2", user_id="U0EVE")
    calls = await lab.standin.wait_for(
        lambda cs: any("needs the operator role; you have viewer" in str(c.params.get("text")) for c in cs), 10)
    assert lab.nodes["pve5"].read_state()["processes"] == []


async def test_a_second_server_on_the_gpu_the_first_leaves_free_is_checked_and_budgeted_on_that_gpu(lab):
    """Two servers in one container, one per GPU: the second (`--base-gpu-id 1`, its own port) is checked, budgeted
    and started on GPU 1 while the first holds GPU 0; a placement past the GPUs the container sees is refused."""
    lab.nodes["pve5"].set_scenario(129, ["ready", "ready"], delay_s=0.02)
    one_gpu = f"{model(lab)} --tp 1 --quantization fp8 --context-length 8192"
    await lab.slash("/sglang", f"launch sglang-a6000 {one_gpu}")
    await wait_text(lab, "*ready*")
    (first,) = await lab.services.attempts.recent("pve5", 129, 1)
    await lab.slash("/sglang", f"budget sglang-a6000 {one_gpu} --base-gpu-id 1")
    calls = await wait_text(lab, "1x RTX A6000", method="chat.postMessage")
    budget = blocks_to_text(post_with(calls, "1x RTX A6000").blocks)
    # GPU 1's free memory, all of it: not GPU 0's, which the first server holds, nor a remedy to stop that server
    assert "WILL FAIL" not in budget and "min free 49139 MiB" in budget and "/sglang stop" not in budget
    assert "Not modelled" not in budget  # the flag is read, not passed through
    await lab.slash("/sglang", f"launch sglang-a6000 {one_gpu} --base-gpu-id 1 --port 30001")
    calls = await wait_text(lab, "Pre-flight passed", method="chat.postMessage")
    checks = blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    assert "*GPUs clean*: no compute process and no held memory on the launch's GPUs" in checks
    (second,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert second.id != first.id
    await lab.standin.wait_for(lambda cs: any(c.method == "chat.update" and second.id in blocks_to_text(c.blocks)
                                              and "*ready*" in blocks_to_text(c.blocks) for c in cs), 60)
    state = lab.nodes["pve5"].read_state()
    held = {p["pid"]: p["gpu_uuid"] for p in state["processes"]}
    uuids = [g["uuid"] for g in state["gpus"]]
    assert held == {first.pid: uuids[0], second.pid: uuids[1]}
    # a stop by the container's name cannot tell which of its two servers is meant: it names both, stops neither
    await lab.slash("/sglang", "stop sglang-a6000", user_id="U0ALICE")
    calls = await lab.standin.wait_for(lambda cs: any("servers run on" in str(c.params.get("text")) for c in cs), 10)
    answer = next(str(c.params["text"]) for c in calls if "servers run on" in str(c.params.get("text")))
    assert (f"2 servers run on pve5:129 (sglang-a6000): `{second.id}` (ready, port 30001); `{first.id}` (ready, port "
            "30000): name the attempt to stop instead of the container") in answer
    assert not any(c.method == "chat.postMessage" and "Stop attempt" in blocks_to_text(c.blocks) for c in calls)
    status, printed = await lab.terminal(["stop", "sglang-a6000", "--yes"])  # --yes asks nothing: still named
    assert status == 2 and f"`{second.id}` (ready, port 30001); `{first.id}` (ready, port 30000)" in printed
    assert {p["pid"] for p in lab.nodes["pve5"].read_state()["processes"]} == {first.pid, second.pid}
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --base-gpu-id 1 --port 30002")
    calls = await wait_text(lab, "Pre-flight refused", method="chat.postMessage")
    refusal = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert ("the launch needs GPUs 1..2 (tp 2 x pp 1 x dp 1, --base-gpu-id 1); container pve5:129 (sglang-a6000) "
            "sees 2 (GPU 0..1)") in refusal


async def test_a_user_group_grants_operator(lab):
    lab.standin.usergroups = {"S0INFRA": ["U0GROUPIE"]}
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                                             "--mamba-ssm-dtype bfloat16", user_id="U0GROUPIE")
    await wait_text(lab, "Launch `a", method="chat.postMessage")
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.9", user_id="U0ALICE")
    calls = await wait_text(lab, "Pre-flight refused", method="chat.postMessage")
    refusal = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "no launch in progress" in refusal and "holds the launch lock" in refusal


async def test_stop_asks_for_a_click_then_verifies_the_memory(lab):
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "*ready*")
    assert lab.nodes["pve5"].read_state()["processes"]
    await lab.slash("/sglang", "stop sglang-a6000", user_id="U0ALICE")
    confirm = post_with(await wait_text(lab, "Stop attempt", method="chat.postMessage"), "Stop attempt")
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    pending = f"gpuops:pending:{yes['value']}"
    await lab.services.attempts.redis.expire(pending, 60)  # a minute left to confirm it
    await lab.click("gpuops_confirm", yes["value"], user_id="U0EVE")  # a viewer's click does nothing
    await lab.standin.wait_for(lambda cs: any("needs the operator role" in str(c.params.get("text")) for c in cs), 10)
    assert lab.nodes["pve5"].read_state()["processes"]
    assert 0 < await lab.services.attempts.redis.ttl(pending) <= 60  # nor does it give the confirmation more time
    await lab.click("gpuops_confirm", yes["value"], user_id="U0ALICE")
    calls = await lab.standin.wait_for(
        lambda cs: any("Stopped attempt" in str(c.params.get("text")) for c in cs if c.method == "response_url"), 30)
    done = [c for c in calls if c.method == "response_url" and "Stopped attempt" in str(c.params.get("text"))][-1]
    assert "(SIGTERM)" in done.params["text"] and "memory returned" in done.params["text"]
    assert lab.nodes["pve5"].read_state()["processes"] == []
    # the launch's card in the channel no longer says ready, and keeps the figures its log gave
    (stopped,) = await lab.services.attempts.recent("pve5", 129, 1)
    calls = await wait_text(lab, "— *stopped*", method="chat.update")
    card = blocks_to_text([c for c in calls if c.method == "chat.update" and c.params["ts"] == stopped.message_ts
                           and "— *stopped*" in blocks_to_text(c.blocks)][-1].blocks)
    assert f"Launch `{stopped.id}`* on pve5:129 (sglang-a6000) — *stopped*" in card
    assert f"KV pool {stopped.observed['kv_tokens']:,} tokens observed" in card and "CUDA graphs captured" in card
    # who stopped it, as Slack shows a person (a mention, not a bare user id), and how
    assert "stopped by <@U0ALICE> (SIGTERM); memory returned: GPU 0: 1 MiB used" in card


async def test_a_confirmation_is_cancelled_by_who_asked_or_whoever_may_act_never_by_a_viewer_and_audited(lab):
    """A stop's confirmation is seen by the whole channel: a viewer's Cancel leaves it as it was (before, anyone's
    click took the operator's stop away, unrecorded); the operator who asked, or an admin, cancels it, and the audit
    says who."""
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "*ready*")

    async def cancel(user_id, needle):
        before = len(lab.standin.calls)
        await lab.click("gpuops_cancel", no["value"], user_id=user_id)
        calls = await lab.standin.wait_for(
            lambda cs: any(needle in str(c.params.get("text")) for c in cs[before:] if c.method == "response_url"), 10)
        return next(c for c in calls[before:] if c.method == "response_url" and needle in str(c.params.get("text")))

    for asker, canceller in (("U0ALICE", "U0ALICE"), ("U0ALICE", "U0ADMIN")):
        await lab.slash("/sglang", "stop sglang-a6000", user_id=asker)
        confirm = post_with(await wait_text(lab, "Stop attempt", method="chat.postMessage"), "Stop attempt")
        no = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_cancel")
        pending = f"gpuops:pending:{no['value']}"
        refused = await cancel("U0EVE", f"only <@{asker}>, who asked for it, or someone who may do it can cancel it")
        assert refused.params["response_type"] == "ephemeral" and not refused.params.get("replace_original")
        assert await lab.services.attempts.redis.exists(pending)  # still there to confirm
        done = await cancel(canceller, f"Cancelled by <@{canceller}>; nothing was done.")
        assert done.params["replace_original"] and not await lab.services.attempts.redis.exists(pending)
    assert lab.nodes["pve5"].read_state()["processes"]  # still serving
    audit = await lab.services.store.audit_entries(50)
    assert [(e["action"], e["user"], e["requested_by"]) for e in audit if e["result"].startswith("cancelled")] == [
        ("sglang.stop", "U0ADMIN", "U0ALICE"), ("sglang.stop", "U0ALICE", "U0ALICE")]
    assert [e["user"] for e in audit if e["action"] == "sglang.stop" and e["result"] == "denied"] == ["U0EVE"] * 2


@pytest.mark.parametrize("slack", ["refused", "unreachable"])
async def test_a_stop_whose_answer_slack_does_not_take_is_said_in_the_channel_and_audited(lab, slack):
    """The click's response_url is refused (it expired or was used up) or cannot be reached: the stop it confirmed
    is done, the audit records it, and the person is told in the channel instead."""
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "*ready*")
    await lab.slash("/sglang", "stop sglang-a6000", user_id="U0ALICE")
    confirm = post_with(await wait_text(lab, "Stop attempt", method="chat.postMessage"), "Stop attempt")
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    if slack == "refused":
        lab.standin.fail["response_url"] = "expired_url"
        await lab.click("gpuops_confirm", yes["value"], user_id="U0ALICE")
    else:  # nothing listens on port 1 of loopback
        await lab.click("gpuops_confirm", yes["value"], user_id="U0ALICE", response_url="http://127.0.0.1:1/r")
    calls = await wait_text(lab, "Stopped attempt", method="chat.postMessage", timeout=30)
    said = [c for c in calls if c.method == "chat.postMessage" and "Stopped attempt" in str(c.params.get("text"))]
    assert len(said) == 1 and said[0].params["channel"] == "C0LAB"
    assert said[0].params["text"].startswith("<@U0ALICE>: ") and "memory returned" in said[0].params["text"]
    assert lab.nodes["pve5"].read_state()["processes"] == []
    audit = await lab.services.store.audit_entries(20)
    result = said[0].params["text"].removeprefix("<@U0ALICE>: ")
    assert [e["result"] for e in audit if e["action"] == "sglang.stop"] == [result]


async def test_free_kills_only_the_listed_pids_after_confirmation(lab):
    node = lab.nodes["pve5"]
    listed = node.spawn_holder(0, "python3 -m sglang.launch_server", 44876, 129)
    _, ack, calls = await lab.slash("/gpu", "free pve5")
    assert ack == "listing what holds GPU memory on pve5…"
    confirm = post_with(await wait_text(lab, "Stop these", method="chat.postMessage"), "Stop these")
    assert f"PID {listed} on GPU 0 (CT 129)" in blocks_to_text(confirm.blocks)
    # how long it has run, from its start time and the node's uptime: just started, as it was
    assert re.search(rf"PID {listed} on GPU 0 \(CT 129\): python3 -m sglang.launch_server, 44876 MiB, running for "
                     r"\d s\b", blocks_to_text(confirm.blocks))
    later = node.spawn_holder(1, "python3 train.py", 20000, 131)  # appeared after the listing: not confirmed
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    await lab.click("gpuops_confirm", yes["value"])
    calls = await lab.standin.wait_for(
        lambda cs: any("Stopped PIDs" in str(c.params.get("text")) for c in cs if c.method == "response_url"), 30)
    assert f"Stopped PIDs {listed} on pve5" in [c for c in calls if c.method == "response_url"][-1].params["text"]
    os.kill(later, 0)  # still alive
    node._children[0].wait(5)  # the listed one is gone


async def test_free_of_memory_no_process_holds_stops_what_holds_the_gpu_open_and_the_memory_goes_with_it(lab):
    """A server killed by name (`pkill -9`) whose child had inherited the GPU device: nvidia-smi shows the memory held
    by no process. /gpu free lists the child, which holds /dev/nvidia0 open, and not NVIDIA's persistence daemon,
    which holds every GPU open by design; the confirmation stops it, and the memory comes back. Before, it answered
    that only a driver reset or a reboot frees that memory, with nothing to stop."""
    node = lab.nodes["pve5"]
    daemon = node.spawn_device_holder("nvidia-persistenced", None, ("/dev/nvidia0", "/dev/nvidia1"), cuda=False)
    monitor = node.spawn_device_holder("nvtop", None, ("/dev/nvidia0", "/dev/nvidia1"), cuda=False)  # NVML only
    child = node.spawn_device_holder("python3", 129, ("/dev/nvidia0",), keeps_orphaned_mib={0: 30000})
    await lab.slash("/gpu", "free pve5")
    confirm = post_with(await wait_text(lab, "Stop these", method="chat.postMessage"), "Stop these")
    text = blocks_to_text(confirm.blocks)
    assert "Stop these 1 process(es) on pve5?" in text and f"PID {daemon}" not in text and f"PID {monitor}" not in text
    assert re.search(rf"PID {child} \(CT 129\): python3, holds /dev/nvidia0 open, with no GPU memory listed for it, "
                     r"running for \d+ s\b", text), text
    assert "GPU 0: 30001 MiB held with no process listed\n• the processes above that hold a GPU open may keep" in text
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    await lab.click("gpuops_confirm", yes["value"])
    calls = await lab.standin.wait_for(
        lambda cs: any("Stopped PIDs" in str(c.params.get("text")) for c in cs if c.method == "response_url"), 30)
    said = [c for c in calls if c.method == "response_url"][-1].params["text"]
    assert f"Stopped PIDs {child} on pve5; memory returned: GPU 0: 1 MiB used; GPU 1: 1 MiB used" in said, said
    os.kill(daemon, 0)  # NVIDIA's daemon and the monitor are untouched
    os.kill(monitor, 0)
    # memory no process holds, and nothing but the daemon holding a GPU open: a leak, named as one
    state = node.read_state()
    state["gpus"][1]["orphaned_mib"] = 12000
    node.write_state(state)
    before = len(lab.standin.calls)
    await lab.slash("/gpu", "free pve5")
    calls = await lab.standin.wait_for(lambda cs: any("No process holds" in str(c.params.get("text"))
                                                      for c in cs[before:]), 30)
    said = next(str(c.params["text"]) for c in calls[before:] if "No process holds" in str(c.params.get("text")))
    assert "GPU 1: 12001 MiB held with no process listed\nno process on pve5 holds a GPU open" in said, said


async def test_free_leaves_alone_a_pid_that_is_another_process_by_the_time_of_the_click(lab):
    """Between the listing and the click the listed process ended and its PID went to a later process (its start
    time on the node differs): that one was never confirmed, so it is not signalled, and the answer says why."""
    node = lab.nodes["pve5"]
    listed = node.spawn_holder(0, "python3 stray.py", 3000, 129)
    await lab.slash("/gpu", "free pve5")
    confirm = post_with(await wait_text(lab, "Stop these", method="chat.postMessage"), "Stop these")
    assert f"PID {listed} on GPU 0 (CT 129)" in blocks_to_text(confirm.blocks)
    stat = node.state_dir / "proc" / str(listed) / "stat"
    real = stat.read_text()
    head, _, rest = real.rpartition(") ")
    fields = rest.split()
    fields[19] = str(int(fields[19]) + 1)  # started a tick later: another process with the same PID
    stat.unlink()
    stat.write_text(f"{head}) {' '.join(fields)}\n")
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    await lab.click("gpuops_confirm", yes["value"])
    calls = await lab.standin.wait_for(
        lambda cs: any("left alone" in str(c.params.get("text")) for c in cs if c.method == "response_url"), 30)
    said = [c for c in calls if c.method == "response_url"][-1].params["text"]
    assert f"PID {listed} is another process now" in said and "Stopped PIDs none on pve5" in said
    os.kill(listed, 0)  # not signalled


async def test_bot_restart_reattaches_to_a_live_launch(lab):
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "Launch `a", method="chat.postMessage")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    # the bot stops (its trackers end between remote commands); the server keeps running
    import asyncio

    for _ in range(100):  # the handler spawns the tracker right after posting the message
        if lab.services.tasks:
            break
        await asyncio.sleep(0.05)
    lab.services.stopping.set()
    await asyncio.wait(list(lab.services.tasks), timeout=10)
    assert not lab.services.tasks
    assert (await lab.services.attempts.get(attempt.id)).status.value == "launching"
    lab.services.stopping.clear()  # ...and starts again
    from handlers.sglang import resume_tracking

    assert await resume_tracking(lab.services, lab.app.client) == 1
    assert lab.services.tasks
    node = lab.nodes["pve5"]
    assert node.launched_pids() == [attempt.pid]


async def test_preflight_names_a_hardware_xid_on_the_launch_gpus(lab):
    """A real row-remap Xid line (tests/fixtures/kernel-log), moved onto GPU 1 of the node, an hour ago."""
    import time as _time

    from tests.conftest import FIXTURES

    line = (FIXTURES / "kernel-log" / "xid-lines.txt").read_text().splitlines()[0].replace("PCI:0000:10:1c",
                                                                                           "PCI:0000:52:00")
    state = lab.nodes["pve5"].read_state()
    stamp = _time.strftime("%Y-%m-%dT%H:%M:%S+0000", _time.gmtime(_time.time() - 3600))
    state["kernel_log"] = [f"{stamp} pve5 kernel: {line}"]
    lab.nodes["pve5"].write_state(state)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "GPU hardware" in text and "GPU 1: Xid 63 once, page retirement / row remapping recorded" in text


async def test_preflight_warns_when_the_launch_gpus_lack_peer_access(lab):
    """The container's `nvidia-smi topo -p2p r` says CNS between its two A6000s (as 2x L4 do in
    tests/fixtures/nvidia-smi/p2p): the pre-flight names the pair and the flag, and does not refuse for it."""
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["smi"] = {"p2p": "CNS"}
    lab.nodes["pve5"].write_state(state)
    # a launch the budget refuses (mem fraction too low), so the checklist is posted without starting SGLang
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "GPU peer access" in text and "GPU0<->GPU1: CNS (Chipset not supported)" in text
    assert "--disable-custom-all-reduce" in text
    # with the flag the launch asks for no peer access, and the check is not made
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                                             "--disable-custom-all-reduce")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "GPU peer access" not in text


async def refusal_text(lab, fraction):
    """The pre-flight's refusal of the seed launch at this --mem-fraction-static (too small: no SGLang starts). A test
    asks with a new fraction each time: the same command again is ignored while the first is still being handled."""
    launch = f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static {fraction}"
    _, _, calls = await lab.slash("/sglang", launch)
    return blocks_to_text(post_with(calls, "Pre-flight refused").blocks)


async def test_preflight_warns_when_the_container_lacks_the_uvm_device_cuda_needs(lab):
    """The lab container's `pct config` passes its GPUs, nvidiactl and nvidia-uvm as Proxmox `devN:` entries: the
    check is ok. Without /dev/nvidia-uvm nvidia-smi still answers there, but CUDA cannot start: the pre-flight says so
    before a launch meets it."""
    text = await refusal_text(lab, 0.8)
    assert ":white_check_mark: *CUDA devices*: CT 129 passes /dev/nvidia-uvm and 4 other NVIDIA device node(s)" in text
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["devices"].remove("/dev/nvidia-uvm")
    lab.nodes["pve5"].write_state(state)
    text = await refusal_text(lab, 0.81)
    assert "*CUDA devices*: CT 129 passes /dev/nvidia0, /dev/nvidia1, /dev/nvidiactl, /dev/nvidia-uvm-tools but not " \
           "/dev/nvidia-uvm" in text
    assert "add `devN: /dev/nvidia-uvm`" in text


async def test_preflight_of_a_multi_gpu_launch_reads_dev_shm_in_the_container(lab):
    """NCCL between the two GPUs may make its segments in /dev/shm: the pre-flight reads the room there (the lab
    container's is this machine's, read by the real df) and says it; a one-GPU launch is not asked."""
    import shutil

    text = await refusal_text(lab, 0.79)
    usage = shutil.disk_usage("/dev/shm")
    assert (f":white_check_mark: *shared memory*: /dev/shm in the container: {usage.free / 2**30:.1f} GiB free of "
            f"{usage.total / 2**30:.1f} GiB") in text
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 1 --mem-fraction-static 0.5")
    assert "*shared memory*" not in blocks_to_text(post_with(calls, "Pre-flight").blocks)


async def test_preflight_looks_inside_the_container_for_the_device_nodes_its_config_passes(lab):
    """The config passes nvidia-uvm, but inside the container stat finds the empty file an optional bind leaves when
    the node had no device: the check fails before a 10-minute load. Passed by raw binds whose cgroup rule allows
    another major (a public guide's 508 for a node's 511), it warns with the rule to add."""
    from tests.conftest import FIXTURES

    text = await refusal_text(lab, 0.8)
    assert ":white_check_mark: *CUDA devices*: CT 129 passes /dev/nvidia-uvm and 4 other NVIDIA device node(s), " \
           "each a device inside the container\n" in text
    node = lab.nodes["pve5"]
    state = node.read_state()
    state["containers"]["129"]["dev_nodes"]["/dev/nvidia-uvm"] = ["regular empty file", 0, 0]
    node.write_state(state)
    text = await refusal_text(lab, 0.81)
    assert ":x: *CUDA devices*: inside CT 129, /dev/nvidia-uvm (regular empty file): not the device node(s) its " \
           "config passes" in text
    assert "CUDA cannot initialise there" in text
    # the guide's raw lines instead of device entries: binds and a cgroup rule for major 508
    config = (FIXTURES / "proxmox" / "uvm-major-mismatch.txt").read_text().split("\n====\n")[1]
    ct = state["containers"]["129"]
    ct["dev_nodes"]["/dev/nvidia-uvm"] = ["character special file", 511, 0]
    ct["devices"] = []  # the guide's container has one GPU; the lab's second is bound the same way
    ct["config_lines"] = [*config.splitlines(),
                          "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file"]
    ct["dev_nodes"]["/dev/nvidia-modeset"] = ["character special file", 195, 254]
    node.write_state(state)
    text = await refusal_text(lab, 0.82)
    assert "[!] *CUDA devices*: inside CT 129, /dev/nvidia-uvm (device 511:0), /dev/nvidia-uvm-tools (device " \
           "511:1), which its config binds but none of its cgroup rules allows (allowed: c 195:*, c 508:*)" in text
    assert "add `lxc.cgroup2.devices.allow: c 511:* rwm`" in text


async def test_a_launch_with_an_api_key_is_probed_with_it_and_never_shows_it(lab):
    """The server's --api-key guards /v1 (as SGLang's middleware does): the health probe passes it, and
    no message, history line or audit record shows it."""
    secret = "sk-lab-" + os.urandom(6).hex()
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               f"--mamba-ssm-dtype bfloat16 --api-key {secret} --force", user_id="U0ADMIN")
    calls = await wait_text(lab, "*ready*")
    card = blocks_to_text([c for c in calls if c.method == "chat.update"][-1].blocks)
    assert "healthy: /health 200, models ['Qwen3.6-27B'], generated ' OK.'" in card  # /v1 answered with the key
    assert "+ --api-key <redacted>" in card or "first attempt" in card
    await lab.slash("/sglang", "history sglang-a6000")
    await wait_text(lab, "Attempts on", method="chat.postMessage")
    everything = " ".join(str(c.params) + str(c.blocks) for c in lab.standin.calls)
    assert secret not in everything
    audit = await lab.services.store.audit_entries()
    assert audit and secret not in str(audit)
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert secret in attempt.argv  # kept to pass on (a relaunch, the probe), never shown


async def test_a_launch_sets_the_environment_words_before_its_flags_and_refuses_a_loaders(lab):
    """NAME=VALUE words before the flags become the server's environment (read back from the running process's
    /proc/PID/environ); a secret one (HF_TOKEN) is never shown; a loader's variable is refused before anything
    runs; the pre-flight shows the words before the command."""
    import os
    from pathlib import Path

    secret = "hf_lab" + os.urandom(6).hex()
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} SGLANG_ENABLE_SPEC_V2=1 NCCL_P2P_DISABLE=1 "
                               f"HF_TOKEN={secret} {SEED} --mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16 "
                               "--force", user_id="U0ADMIN")
    await wait_text(lab, "*ready*")
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert attempt.argv[:4] == ("SGLANG_ENABLE_SPEC_V2=1", "NCCL_P2P_DISABLE=1", f"HF_TOKEN={secret}",
                                "--model-path")
    environ = Path(f"/proc/{attempt.pid}/environ").read_bytes().split(b"\0")
    assert {b"SGLANG_ENABLE_SPEC_V2=1", b"NCCL_P2P_DISABLE=1", f"HF_TOKEN={secret}".encode()} <= set(environ)
    cmdline = Path(f"/proc/{attempt.pid}/cmdline").read_bytes().split(b"\0")
    assert b"--tp" in cmdline and not any(b"NCCL_P2P_DISABLE" in word for word in cmdline)  # not a flag
    everything = " ".join(str(c.params) + str(c.blocks) for c in lab.standin.calls)
    assert secret not in everything and secret not in str(await lab.services.store.audit_entries())
    # a loader's variable: refused with what may be set, nothing started
    _, ack, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} LD_PRELOAD=/tmp/x.so {SEED}")
    said = ack + " ".join(str(c.params.get("text")) + blocks_to_text(c.blocks) for c in calls)
    assert "`LD_PRELOAD` is not a variable a launch may set: only SGLANG_*" in said
    assert len(await lab.services.attempts.recent("pve5", 129, 5)) == 1
    # the pre-flight's command line (refused: the server above holds the GPUs): the words first, the secret redacted
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} NCCL_P2P_DISABLE=1 HF_TOKEN={secret} "
                                             f"{SEED} --mem-fraction-static 0.8")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert f"`NCCL_P2P_DISABLE=1 'HF_TOKEN=<redacted>' {lab.services.inventory.containers['sglang-a6000'].python} -m " \
           "sglang.launch_server --model-path" in text and secret not in text


async def test_a_float16_launch_of_a_hybrid_model_is_refused_and_the_env_button_sets_the_conv_dtype(lab):
    """sglang#30178/#31719: a hybrid model run in float16 over the default bfloat16 conv state fails its first
    request; the pre-flight refuses it and its remedy button relaunches the same flags with
    SGLANG_MAMBA_CONV_DTYPE=float16 before them, which the server's environment then holds."""
    from pathlib import Path

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    flags = "--tp 2 --context-length 32768 --mem-fraction-static 0.88 --dtype half"
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {flags}")
    refusal = post_with(calls, "Pre-flight refused")
    text = blocks_to_text(refusal.blocks)
    assert "the first request fails: the conv state is bfloat16" in text and "Half for the source" in text
    choice = next(b for b in buttons(refusal) if "SGLANG_MAMBA_CONV_DTYPE=float16 (env)" in b["text"]["text"])
    status, _ = await lab.click(choice["action_id"], choice["value"])
    assert status == 200
    await wait_text(lab, "*ready*")
    (attempt, refused) = await lab.services.attempts.recent("pve5", 129, 2)
    assert attempt.argv[0] == "SGLANG_MAMBA_CONV_DTYPE=float16" and "--dtype" in attempt.argv
    assert b"SGLANG_MAMBA_CONV_DTYPE=float16" in Path(f"/proc/{attempt.pid}/environ").read_bytes().split(b"\0")
    await lab.slash("/sglang", "history sglang-a6000")
    calls = await wait_text(lab, "Attempts on", method="chat.postMessage")
    assert "+ SGLANG_MAMBA_CONV_DTYPE=float16" in blocks_to_text(post_with(calls, "Attempts on").blocks)

async def test_free_leaves_a_recorded_launch_to_sglang_stop_and_lists_the_rest(lab):
    """A recorded launch's GPU processes (its process group in the container) are named, not offered for
    killing: /sglang stop ends the whole group and records it."""
    from tests.handlers.test_scheduler import ready_server

    attempt = await ready_server(lab)
    _, _, _ = await lab.slash("/gpu", "free pve5")
    calls = await lab.standin.wait_for(lambda cs: any(
        "Only recorded launches hold GPU memory" in str(c.params.get("text")) or "Only recorded launches" in
        blocks_to_text(c.blocks) for c in cs if c.method in ("chat.postMessage", "response_url")), 30)
    note = [c for c in calls if "Only recorded launches" in blocks_to_text(c.blocks) + str(c.params.get("text"))][-1]
    assert f"/sglang stop {attempt.id}" in blocks_to_text(note.blocks) + str(note.params.get("text"))
    node = lab.nodes["pve5"]
    stray = node.spawn_holder(0, "python3 train.py", 3000, 129)  # not a launch: offered, after a click
    await lab.slash("/gpu", "free pve5")
    confirm = post_with(await wait_text(lab, "Stop these 1", method="chat.postMessage"), "Stop these 1")
    text = blocks_to_text(confirm.blocks)
    assert f"PID {stray} on GPU 0 (CT 129)" in text and f"PID {attempt.pid} " not in text
    assert f"`/sglang stop {attempt.id}`" in text
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    await lab.click("gpuops_confirm", yes["value"])
    calls = await lab.standin.wait_for(
        lambda cs: any("Stopped PIDs" in str(c.params.get("text")) for c in cs if c.method == "response_url"), 30)
    assert f"Stopped PIDs {stray} on pve5" in [c for c in calls if c.method == "response_url"][-1].params["text"]
    os.kill(attempt.pid, 0)  # the server still runs
    assert (await lab.services.attempts.get(attempt.id)).status.value == "ready"


async def test_a_model_given_by_its_hub_id_launches_from_the_containers_cache(lab):
    import shutil
    from pathlib import Path

    from tests.conftest import FIXTURES

    # the container's Hugging Face cache holds the model; SGLang gets the id, the pre-flight reads the snapshot
    repo = Path(container_path(lab.nodes["pve5"], 129, "hf-cache", "models--Qwen--Qwen3.6-27B"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    shutil.copy(FIXTURES / "model-configs/Qwen__Qwen3.6-27B/config.json", repo / "snapshots" / revision)
    try:
        lab.nodes["pve5"].set_scenario(129, ["auto"], delay_s=0.02)
        status, ack, _ = await lab.slash("/sglang", f"launch sglang-a6000 Qwen/Qwen3.6-27B {SEED} "
                                                    "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
        assert status == 200 and ack.startswith("running the pre-flight")
        calls = await wait_text(lab, "*ready*")
        card = blocks_to_text(next(c for c in calls if c.method == "chat.update"
                                   and "*ready*" in blocks_to_text(c.blocks)).blocks)
        # the pre-flight sized the snapshot's config.json; SGLang was given the id, as the user typed it
        assert "GiB/GPU observed" in card and "predicted" in card and "models ['Qwen3.6-27B']" in card
        log = re.search(r"log (\S+\.log)", card)
        assert log and "model_path='Qwen/Qwen3.6-27B'" in Path(log.group(1)).read_text()
    finally:
        shutil.rmtree(repo.parent)


async def test_a_card_slack_would_not_edit_does_not_stop_the_launch_being_followed_and_is_drawn_again_later(lab):
    """Slack refusing the card's edits (a passing internal_error) costs neither the following nor the result: the
    launch is followed to ready, its result said in the thread, and the card drawn again on the bot's next tick."""
    from bot.scheduler import Scheduler

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    lab.standin.fail["chat.update"] = "internal_error"
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16")
    await lab.standin.wait_for(lambda cs: any(c.method == "chat.postMessage" and "thread_ts" in c.params
                                              and "observed" in str(c.params.get("text")) for c in cs), 60)
    (ready,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert ready.status is AttemptStatus.READY
    refused = [c for c in lab.standin.calls if c.method == "chat.update" and c.params.get("ts") == ready.message_ts]
    assert refused and not any("*ready*" in blocks_to_text(c.blocks) for c in refused[:-1])  # only the last said it
    del lab.standin.fail["chat.update"]
    before = len(lab.standin.calls)
    await Scheduler(lab.services, lab.app.client).tick()
    cards = [blocks_to_text(c.blocks) for c in lab.standin.calls[before:]
             if c.method == "chat.update" and c.params.get("ts") == ready.message_ts]
    assert len(cards) == 1 and f"Launch `{ready.id}`* on pve5:129 (sglang-a6000) — *ready*" in cards[-1]


async def confirmed_stop(lab, spec):
    """`/sglang stop <spec>` confirmed by an operator's click: the answer saying what the stop did."""
    await lab.slash("/sglang", f"stop {spec}")
    confirm = post_with(await wait_text(lab, "Stop attempt", method="chat.postMessage"), "Stop attempt")
    yes = next(b for b in buttons(confirm) if b["action_id"] == "gpuops_confirm")
    await lab.click("gpuops_confirm", yes["value"], user_id="U0ALICE")
    calls = await lab.standin.wait_for(
        lambda cs: any("Stopped attempt" in str(c.params.get("text")) for c in cs if c.method == "response_url"), 30)
    return [c for c in calls if c.method == "response_url" and "Stopped attempt" in str(c.params.get("text"))][-1] \
        .params["text"]


async def test_a_stop_leaves_alone_a_process_that_has_the_attempts_pid_now(lab):
    """Once a server has exited (or its container restarted) its PID can be another process's: a stop signals only
    the process that writes to the attempt's own log, and says it left the other alone."""
    import os
    import signal
    import subprocess
    from dataclasses import replace

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "*ready*")
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    os.killpg(attempt.pid, signal.SIGKILL)  # the stand-in this test's lab started
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group of its own, as the server's was
    try:
        await lab.services.attempts.save(replace(attempt, pid=other.pid))  # the PID, as if the number came round
        done = await confirmed_stop(lab, attempt.id)
        assert (f"(none: PID {other.pid} is another process's now, not writing to this attempt's log, so it was left "
                "alone)") in done
        assert other.poll() is None  # still running: never signalled
    finally:
        other.kill()
        other.wait()


async def failed_card(lab, flags):
    """A launch from Slack with these flags that fails: its attempt, and its card as the failure drew it."""
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {flags}")
    calls = await wait_text(lab, "— *failed*", method="chat.update")
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    return attempt, blocks_to_text([c for c in calls if c.method == "chat.update"
                                    and "— *failed*" in blocks_to_text(c.blocks)][-1].blocks)


async def status_lines_of(lab, pid):
    """`/gpu status sglang-a6000`: its lines naming this PID."""
    await lab.slash("/gpu", "status sglang-a6000")
    status = blocks_to_text(post_with(await wait_text(lab, "GPU status", method="chat.postMessage"),
                                      "GPU status").blocks)
    return [line for line in status.splitlines() if f" {pid} " in line]


def latest_card(lab, attempt):
    """The launch card of ``attempt`` as its last delivered edit drew it."""
    return blocks_to_text([c for c in lab.standin.of("chat.update") if c.delivered
                           and c.params.get("ts") == attempt.message_ts][-1].blocks)


async def stored_once(lab, attempt, settled, timeout_s=30):
    """``attempt``'s record once ``settled(record)`` holds (the record as it is then, when it never does)."""
    for _ in range(int(timeout_s * 10)):
        if settled(stored := await lab.services.attempts.get(attempt.id)):
            break
        await asyncio.sleep(0.1)
    return stored


def left_running(attempt):
    """What a failed launch's card and thread say of its server, left running."""
    return (f"its server (PID {attempt.pid}) was left running, holding its GPU memory: `/sglang log {attempt.id}` "
            f"shows what it says, `/sglang stop {attempt.id}` stops it")


async def test_a_launch_failing_its_health_check_says_its_server_was_left_running_and_a_stop_ends_it(lab):
    """The log says ready, yet the server answers 503: the launch failed, and nothing stopped it silently. Its card
    and thread say the server still holds its GPUs and how to stop it; a stop of the container (by PID, confirmed)
    finds it and ends it."""
    lab.nodes["pve5"].set_scenario(129, ["unhealthy"], delay_s=0.02)
    attempt, card = await failed_card(lab, f"{SEED} --mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    assert "first error: `server said ready but the health check failed: HTTPError: HTTP Error 503" in card
    left = left_running(attempt)
    assert left in card and "reads its log on" not in card  # it said ready: nothing more to wait for
    thread = await wait_text(lab, f"Attempt `{attempt.id}` failed", method="chat.postMessage")
    assert any(left in str(c.params.get("text")) for c in thread if c.params.get("thread_ts") == attempt.thread_ts)
    assert lab.nodes["pve5"].read_state()["processes"]  # still holding its GPUs
    # the status names its processes as the launch's, and freeing the GPUs leaves it to a stop, which records it
    held = await status_lines_of(lab, attempt.pid)
    assert len(held) == 2 and all(line.rstrip().endswith(f"<- {attempt.id} (failed, left running, port 30000)")
                                  for line in held)
    await lab.slash("/gpu", "free sglang-a6000")
    free = post_with(await wait_text(lab, "Only recorded launches", method="chat.postMessage"),
                     "Only recorded launches")
    assert f"`/sglang stop {attempt.id}` stops its whole process group" in blocks_to_text(free.blocks)
    done = await confirmed_stop(lab, "sglang-a6000")  # finds the container's newest server, left running
    assert "(SIGTERM)" in done and "memory returned" in done
    assert lab.nodes["pve5"].read_state()["processes"] == []
    # its record, and so its card, says so: failed still, its server no longer left running; a second stop finds none
    from bot.scheduler import Scheduler

    await Scheduler(lab.services, lab.app.client).tick()
    card = latest_card(lab, attempt)
    assert "— *failed*" in card and left not in card
    assert (f"its server (PID {attempt.pid}), left running, was then stopped by <@U0ALICE> (SIGTERM); memory "
            "returned") in card
    assert f"Run `/sglang triage {attempt.id}`" in card
    before = len(lab.standin.calls)
    await lab.slash("/sglang", "stop sglang-a6000")
    said = await lab.standin.wait_for(lambda cs: any(c.method == "response_url" for c in cs[before:]), 30)
    assert "no running attempt on pve5:129" in [c for c in said[before:] if c.method == "response_url"][0].params[
        "text"]


async def test_a_launch_given_up_on_as_hung_leaves_its_server_to_look_at_and_a_stop_finds_it(lab):
    """No output for the stall timeout: the launch failed as a hang, but its server still runs and holds its GPUs
    (a person runs py-spy on it, or stops it). Its card says so; the status names its processes as the launch's and a
    stop of the container finds it, where before they were anonymous and the stop found no running attempt."""
    lab.services.settings = lab.services.settings.model_copy(update={"stall_timeout_s": 1.5})
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    attempt, card = await failed_card(lab, "--tp 2 --mem-fraction-static 0.88 --mamba-ssm-dtype bfloat16")
    assert lab.nodes["pve5"].read_state()["processes"]  # still holding its GPUs
    held = await status_lines_of(lab, attempt.pid)
    assert len(held) == 2 and all(line.rstrip().endswith(f"<- {attempt.id} (failed, left running, port 30000)")
                                  for line in held)
    assert left_running(attempt) in card
    assert f"Run `/sglang triage {attempt.id}`" in card
    # its thread says where its process waits now, read by py-spy in the container: the stand-in's own frame
    said = [str(c.params.get("text")) for c in await wait_text(lab, f"Attempt `{attempt.id}` failed",
                                                                 method="chat.postMessage")
            if f"Attempt `{attempt.id}` failed" in str(c.params.get("text"))][-1]
    assert re.search(rf"Where its processes are now \(py-spy, innermost frame first\):\n```PID {attempt.pid} .*"
                     r"sglang\.launch_server.*\n  MainThread \(idle\): main \(\S*fake_sglang\.py:\d+\)", said), said
    assert re.search(r"first error: `no output for \d s after loading weights began - a hang at loading weights`",
                     card)
    # the next launch's pre-flight names that attempt as what holds its GPUs
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88")
    refusal = blocks_to_text(post_with(await wait_text(lab, "Pre-flight refused", method="chat.postMessage"),
                                       "Pre-flight refused").blocks)
    clean = next(line for line in refusal.splitlines() if "*GPUs clean*" in line)
    assert clean.count(f"PID {attempt.pid} (CT 129)") == 2
    assert clean.count(f"<- {attempt.id} (failed, left running, port 30000)") == 2, clean
    # and its first remedy stops that attempt, where /gpu free would leave a launch's processes to its stop
    assert f"1. `stop {attempt.id} (failed, left running, port 30000) first: /sglang stop {attempt.id}` — " in refusal
    assert "/gpu free" not in refusal, refusal
    done = await confirmed_stop(lab, "sglang-a6000")
    assert "(SIGTERM)" in done and "memory returned" in done
    assert lab.nodes["pve5"].read_state()["processes"] == []
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.status is AttemptStatus.FAILED and not stored.left_running


async def test_a_launch_given_up_on_that_comes_up_after_all_is_recorded_ready(lab):
    """Silent for longer than the stall timeout after its weights began to load (a slow disk, a first JIT compile),
    then on to ready: the launch was given up on as a hang with its server left running, and its log is read on. Once
    the server comes up and answers, its card, thread and record say ready, and how long after the give-up; the status
    names it ready. Before, its card said failed and the status "failed, left running" while it served."""
    lab.services.settings = lab.services.settings.model_copy(update={"stall_timeout_s": 1.5})
    lab.nodes["pve5"].set_scenario(129, ["slow_load"], delay_s=0.02, pause_s=5)
    attempt, card = await failed_card(lab, "--tp 2 --mem-fraction-static 0.88 --mamba-ssm-dtype bfloat16")
    assert "a hang at loading weights" in card and left_running(attempt) in card
    assert re.search(r"gpuops reads its log on until \d\d:\d\d UTC: should it come up after all, it is recorded "
                     "ready", card), card
    calls = await wait_text(lab, f"Attempt `{attempt.id}` ready", method="chat.postMessage")
    said = next(str(c.params["text"]) for c in calls if f"Attempt `{attempt.id}` ready" in str(c.params.get("text")))
    assert re.search(r"ready: came up \d+ s after gpuops gave up on it; healthy: /health 200", said), said
    assert "• kv_tokens: observed 422310" in said  # the log's readings after the silence
    stored = await lab.services.attempts.get(attempt.id)
    assert [t.status for t in stored.transitions][-3:] == [AttemptStatus.LAUNCHING, AttemptStatus.FAILED,
                                                          AttemptStatus.READY]
    assert stored.error_line is None and not stored.left_running and stored.observed["came_up_late_s"] >= 1
    card = latest_card(lab, attempt)
    assert "— *ready*" in card and "first error" not in card and "came up" in card
    held = await status_lines_of(lab, attempt.pid)
    assert len(held) == 2 and all(line.rstrip().endswith(f"<- {attempt.id} (ready, port 30000)") for line in held)


async def test_a_follower_whose_reads_fail_a_few_times_reads_again_and_follows_on(lab, caplog):
    """Reads of the launch's log fail a few rounds in a row (a dropped SSH connection, a busy node): the follower
    reads again the next round and follows the launch on to ready, where before it stopped at the first failure and
    the card stayed as it was until the scheduler's next tick."""
    import logging

    from bot.launch import FOLLOW_RETRIES

    caplog.set_level(logging.INFO)
    lab.nodes["pve5"].set_scenario(129, ["slow_load"], delay_s=0.02, pause_s=4)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "Launch `a", method="chat.postMessage")
    lab.nodes["pve5"].fail_next("tail", times=FOLLOW_RETRIES)
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    stored = await stored_once(lab, attempt, lambda record: record.status is AttemptStatus.READY)
    assert stored.status is AttemptStatus.READY and stored.error_line is None
    again = [r.getMessage() for r in caplog.records if "reading again" in r.getMessage()]
    assert again[-1].startswith(f"following attempt {attempt.id}: ") and again[-1].endswith(
        f"reading again ({FOLLOW_RETRIES} of {FOLLOW_RETRIES})"), again
    assert not any("stopped" in r.getMessage() and "following attempt" in r.getMessage() for r in caplog.records)
    for _ in range(100):  # its card is drawn once the record is
        if "— *ready*" in latest_card(lab, stored):
            break
        await asyncio.sleep(0.1)
    assert "— *ready*" in latest_card(lab, stored)


async def test_a_follower_whose_reads_keep_failing_is_followed_again_on_the_next_tick(lab, caplog):
    """Reads of the launch's log fail more rounds in a row than the follower reads again: it stops and says so as a
    warning naming the attempt, where before it died as a crashed background task with a traceback; the launch runs
    on, and the scheduler's next tick follows it again from its log, up to ready."""
    import logging

    from bot.launch import FOLLOW_RETRIES
    from bot.scheduler import Scheduler

    caplog.set_level(logging.WARNING)
    lab.nodes["pve5"].set_scenario(129, ["slow_load"], delay_s=0.02, pause_s=4)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "Launch `a", method="chat.postMessage")
    lab.nodes["pve5"].fail_next("tail", times=FOLLOW_RETRIES + 1)
    for _ in range(100):
        if any("following attempt" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.1)
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    stopped = [r for r in caplog.records if "following attempt" in r.getMessage()]
    assert stopped and stopped[0].levelname == "WARNING", [r.getMessage() for r in caplog.records]
    assert stopped[0].getMessage().startswith(f"following attempt {attempt.id} stopped: ")
    assert "the scheduler's next tick follows it again" in stopped[0].getMessage()
    assert not any("background task failed" in r.getMessage() for r in caplog.records)
    assert attempt.status is AttemptStatus.LAUNCHING
    result = await Scheduler(lab.services, lab.app.client).tick()
    assert result.taken_over == [attempt.id]
    stored = await stored_once(lab, attempt, lambda record: record.status is AttemptStatus.READY)
    assert stored.status is AttemptStatus.READY and stored.error_line is None


async def test_a_launch_given_up_on_whose_server_then_fails_shows_the_cause_its_log_went_on_to_name(lab):
    """Silent past the stall timeout, then on to the KV pool, where it fails: given up on as a hang, then its server
    exited by itself. Its record and card name the KV pool's "Not enough memory" as the first error, where before they
    kept the give-up's "no output" (no cause: the log went on), and say its server ended."""
    from bot.scheduler import Scheduler

    lab.services.settings = lab.services.settings.model_copy(update={"stall_timeout_s": 1.5})
    lab.nodes["pve5"].set_scenario(129, ["kv_pool_oom"], delay_s=0.02, pause_s=5)
    attempt, card = await failed_card(lab, "--tp 2 --mem-fraction-static 0.88 --mamba-ssm-dtype bfloat16")
    assert "a hang at loading weights" in card and left_running(attempt) in card
    stored = await stored_once(lab, attempt, lambda record: not record.left_running)
    assert stored.status is AttemptStatus.FAILED and not stored.left_running
    assert "RuntimeError: Not enough memory" in stored.error_line, stored.error_line
    assert stored.observed["server_ended"]["exited"] == f"the server's process (PID {attempt.pid}) exited"
    assert stored.transitions[-1].note.startswith("no output for ")  # the give-up stays in its transitions
    await Scheduler(lab.services, lab.app.client).tick()  # its card is drawn again from the record
    card = latest_card(lab, attempt)
    assert "first error: `RuntimeError: Not enough memory" in card and "then ended on its own" in card, card
    assert left_running(attempt) not in card


async def test_a_launch_given_up_on_that_says_ready_but_fails_its_health_check_is_watched_no_more(lab):
    """Silent past the stall timeout, then ready by its log, but answering 503: it stays failed with its server left
    running, now with the failed health check as its first error, and is watched no more: no replica takes the watch
    over (before, one did on every tick, probing it again until the watch's end) and its card promises nothing."""
    from bot.scheduler import Scheduler

    lab.services.settings = lab.services.settings.model_copy(update={"stall_timeout_s": 1.5})
    lab.nodes["pve5"].set_scenario(129, ["unhealthy"], delay_s=0.02, pause_s=5)
    attempt, card = await failed_card(lab, "--tp 2 --mem-fraction-static 0.88 --mamba-ssm-dtype bfloat16")
    assert "a hang at loading weights" in card
    late = "server said ready after gpuops gave up on it, but the health check failed: HTTPError: HTTP Error 503"
    stored = await stored_once(lab, attempt, lambda record: record.error_line.startswith(late))
    assert stored.error_line.startswith(late), stored.error_line
    assert stored.status is AttemptStatus.FAILED and stored.left_running and stored.given_up_at is None
    result = await Scheduler(lab.services, lab.app.client).tick()
    assert result.taken_over == []
    card = latest_card(lab, attempt)
    assert f"first error: `{late}" in card and left_running(attempt) in card and "reads its log on" not in card
    done = await confirmed_stop(lab, "sglang-a6000")
    assert "(SIGTERM)" in done and lab.nodes["pve5"].read_state()["processes"] == []
