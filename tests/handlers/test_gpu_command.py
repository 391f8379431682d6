"""/gpu through the real Bolt app: signed HTTP in, Slack Web API calls out to the stand-in."""

import json
import re
import time

import aiohttp

from bot.slack_standin import signed_headers, slash_body
from bot.store import connect
from bot.views import blocks_to_text


async def _post(lab, body, headers):
    async with aiohttp.ClientSession() as http, http.post(lab.app_url, data=body, headers=headers) as answer:
        return answer.status, await answer.text()


async def test_signed_gpu_status_acks_fast_and_posts_the_table(lab):
    body = slash_body("/gpu", "status", response_url=lab.standin.response_url())
    started = time.monotonic()
    status, ack = await _post(lab, body, signed_headers(lab.signing_secret, body))
    ack_s = time.monotonic() - started
    assert status == 200 and ack == "checking 3 targets…"
    assert ack_s < 1.0  # acked before any remote work (Slack allows 3 s)
    calls = await lab.standin.wait_for(lambda calls: any(c.method == "chat.postMessage" for c in calls), 20)
    (post,) = [c for c in calls if c.method == "chat.postMessage"]
    assert post.params["channel"] == "C0LAB" and post.headers["Authorization"].startswith("Bearer xoxb-lab-")
    text = blocks_to_text(post.blocks)
    assert "*pve5*  driver 580.126.09 · CUDA 13.0 · 2 GPUs" in text
    assert text.count("RTX A6000") == 2 and "1/49140 MiB" in text
    assert "[X] *pve6*  nvidia-smi error (nvml-driver-library-mismatch)" in text
    assert "[X] *pve7*  unreachable" in text
    assert post.params["text"].startswith("GPU status: 3 targets (1 ok, 1 smi-error, 1 unreachable)")


async def test_bad_signature_and_stale_timestamp_are_401(lab):
    body = slash_body("/gpu", "status")
    assert (await _post(lab, body, signed_headers("not-the-secret", body)))[0] == 401
    stale = signed_headers(lab.signing_secret, body, timestamp=int(time.time()) - 6 * 60)
    assert (await _post(lab, body, stale))[0] == 401
    assert (await _post(lab, body, {"Content-Type": "application/x-www-form-urlencoded"}))[0] == 401
    assert lab.standin.of("chat.postMessage") == []


async def test_malformed_command_gets_usage_and_no_remote_work(lab):
    status, ack, calls = await lab.slash("/gpu", "status pve5 pve6")
    assert status == 200 and "takes one target" in ack and "/gpu status" in ack
    status, ack, _ = await lab.slash("/gpu", 'status "unbalanced')
    assert "could not read the command" in ack
    status, ack, _ = await lab.slash("/gpu", "status nosuchnode")
    assert "unknown target `nosuchnode`" in ack and "pve5" in ack
    assert lab.nodes["pve5"].calls() == []


async def test_container_status_by_inventory_name(lab):
    lab.nodes["pve5"].add_process(48211, 0, "python3 -m sglang.launch_server", 44000, 129)
    status, ack, calls = await lab.slash("/gpu", "status sglang-a6000")
    assert ack == "checking 1 target…"
    text = blocks_to_text(next(c for c in calls if c.method == "chat.postMessage").blocks)
    assert "pve5:129 (sglang-a6000)" in text and "processes of CT 129 (read on node pve5): 1" in text
    assert "48211" in text and "python3 -m sglang.launch_server" in text


async def test_a_stopped_or_missing_container_is_said_as_such_not_as_unreachable(lab):
    """The node answered, and Proxmox said why the container's GPUs cannot be read: its own state, not a network
    fault."""
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["status"] = "stopped"
    lab.nodes["pve5"].write_state(state)
    texts = []
    for target in ("sglang-a6000", "pve5:999"):
        _, _, calls = await lab.slash("/gpu", f"status {target}")
        texts.append(next(c for c in calls if c.method == "chat.postMessage"))
    stopped, missing = (blocks_to_text(post.blocks) for post in texts)
    assert "[-] *pve5:129 (sglang-a6000)*  container 129 on pve5 is not running, so nothing in it holds a GPU" \
        in stopped
    assert texts[0].params["text"].startswith("GPU status: 1 target (1 stopped)")
    assert "[!] *pve5:999*  pve5 has no container 999 (pct: Configuration file" in missing
    assert texts[1].params["text"].startswith("GPU status: 1 target (1 no-container)")
    assert "unreachable" not in stopped + missing


async def test_not_in_channel_falls_back_to_response_url(lab):
    lab.standin.fail["chat.postMessage"] = "not_in_channel"
    status, ack, calls = await lab.slash("/gpu", "status pve5")
    responded = [c for c in calls if c.method == "response_url"]
    assert responded and "pve5" in blocks_to_text(responded[0].blocks)


async def test_a_post_slack_refuses_goes_to_the_person_privately(lab, caplog):
    """Slack refusing the answer's post (a passing internal_error) costs the person neither the answer nor a
    "gpuops failed" reply: it comes through the command's response_url, and the log says why."""
    lab.standin.fail["chat.postMessage"] = "internal_error"
    await lab.slash("/gpu", "status pve5")
    calls = await lab.standin.wait_for(lambda cs: any(c.method == "response_url" and c.blocks for c in cs), 30)
    responded = [c for c in calls if c.method == "response_url"]
    assert len(responded) == 1 and "pve5" in blocks_to_text(responded[0].blocks)
    assert responded[0].params["response_type"] == "ephemeral"
    assert "chat.postMessage to C0LAB failed with internal_error; answering through response_url" in caplog.text


async def test_a_post_slack_refuses_everywhere_is_answered_with_a_reference_to_the_log(lab, caplog):
    """When the response_url refuses it too, the refusal goes on to the error handler: the person is told that the
    bot failed (by the reference in its log), not left at "checking…"."""
    lab.standin.fail["chat.postMessage"] = "internal_error"
    lab.standin.fail["response_url"] = "used_url"
    await lab.slash("/gpu", "status pve5", answered=False)
    calls = await lab.standin.wait_for(lambda cs: any("gpuops failed while answering" in str(c.params.get("text"))
                                                      for c in cs), 30)
    assert [c.params["text"] for c in calls if c.method == "response_url"][-1].startswith(":warning: gpuops failed")
    assert "answering through the response_url failed (HTTP 404 used_url)" in caplog.text


async def test_gpu_health_posts_the_report_with_its_chart_and_privately_where_the_bot_is_not(lab):
    """`/gpu health` answers in the channel with the daily report and its chart in the thread; in a channel the bot is
    not in, the report comes privately through the command's response_url (a chart cannot go there)."""
    _, ack, _ = await lab.slash("/gpu", "health pve5")
    assert ack == "building the health report (last 24 h)…"
    calls = await lab.standin.wait_for(lambda cs: any(c.method == "files.completeUploadExternal" for c in cs), 60)
    (post,) = [c for c in calls if c.method == "chat.postMessage"]
    assert post.params["channel"] == "C0LAB" and "GPU health" in post.params["text"]
    lab.standin.fail["chat.postMessage"] = "not_in_channel"
    await lab.slash("/gpu", "health pve5")
    calls = await lab.standin.wait_for(lambda cs: any(c.method == "response_url" and "GPU health" in str(
        c.params.get("text")) for c in cs), 60)
    (answer,) = [c for c in calls if c.method == "response_url"]
    assert answer.params["response_type"] == "ephemeral" and "pve5" in blocks_to_text(answer.blocks)


async def test_rate_limited_post_is_retried(lab):
    lab.standin.rate_limit["chat.postMessage"] = 1
    status, ack, calls = await lab.slash("/gpu", "status pve5")
    await lab.standin.wait_for(lambda c: len([x for x in c if x.method == "chat.postMessage"]) >= 2, 10)
    assert len(lab.standin.of("chat.postMessage")) == 2  # one 429, then delivered


async def test_a_post_slacks_servers_answer_503_is_tried_again_and_delivered_in_the_channel(lab):
    """Slack's servers failing a moment (503, twice): the status is tried again and lands in the channel, rather than
    going privately to the person through the response_url."""
    lab.standin.unavailable["chat.postMessage"] = 2
    await lab.slash("/gpu", "status pve5")
    calls = await lab.standin.wait_for(lambda c: any(x.delivered for x in c if x.method == "chat.postMessage"), 20)
    posts = [c for c in calls if c.method == "chat.postMessage"]
    assert [c.delivered for c in posts] == [False, False, True] and "pve5" in blocks_to_text(posts[-1].blocks)
    assert [c for c in calls if c.method == "response_url"] == []


async def test_status_is_audited_in_redis(lab, redis_url):
    await lab.slash("/gpu", "status pve7", user_id="U0BOB")
    client = connect(redis_url)
    try:
        entries = await client.xrange("gpuops:audit")
    finally:
        await client.aclose()
    (entry,) = [fields for _, fields in entries]
    assert entry["action"] == "gpu.status" and entry["user"] == "U0BOB" and entry["result"] == "pve7=unreachable"
    assert "xoxb" not in json.dumps(entry)


async def test_status_names_the_launch_whose_process_group_holds_the_gpus(lab):
    """A ready server's GPU processes are shown as its launch's: matched on the node by container and process
    group (the launch's own PID inside the container), read from /proc next to the cgroup."""
    from tests.handlers.test_scheduler import ready_server

    attempt = await ready_server(lab)
    await lab.slash("/gpu", "status sglang-a6000")

    def status_posts(calls):
        return [c for c in calls if c.method == "chat.postMessage" and str(c.params.get("text")).startswith(
            "GPU status")]

    post = status_posts(await lab.standin.wait_for(lambda c: bool(status_posts(c)), 20))[-1]
    lines = [line for line in blocks_to_text(post.blocks).splitlines() if f" {attempt.pid} " in line]
    assert len(lines) == 2  # both GPUs of its tp 2
    assert all(line.rstrip().endswith(f"<- {attempt.id} (ready, port {attempt.port})") for line in lines)
    # how long each has run, from its start time on the node and the node's uptime
    assert all(re.search(r"  \(up \d+ s\)  <- ", line) for line in lines), lines
