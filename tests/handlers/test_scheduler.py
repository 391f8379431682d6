"""Two replicas against one real Redis, with an injected clock: daily posts, sampling, takeover."""

import asyncio
import os
import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from bot.app import build_services
from bot.core.inventory import ScheduledPost
from bot.scheduler import Scheduler
from bot.slack import web_client
from bot.views import blocks_to_text
from tests.conftest import FIXTURES
from tests.views.test_status_render import check_golden

XID_LINES = (FIXTURES / "kernel-log" / "xid-lines.txt").read_text().splitlines()


def at(text):
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo("UTC")).timestamp()


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
async def replicas(lab):
    """Replica A is the lab's app; replica B is a second process's worth of wiring on the same Redis."""
    schedules = {"morning": ScheduledPost(channel="C0OPS", at="08:30", timezone="UTC", targets="all")}
    lab.services.inventory = lab.services.inventory.model_copy(update={"schedules": schedules})
    b = build_services(lab.services.settings, lab.services.inventory)
    client = web_client(lab.services.settings.slack_bot_token.get_secret_value(), lab.standin.base_url)
    clock = Clock(at("2026-12-03 05:00"))
    one = Scheduler(lab.services, lab.app.client, clock, sample_interval_s=1800)
    two = Scheduler(b, client, clock, sample_interval_s=1800)
    yield lab, one, two, clock
    await b.close()


def health_posts(lab):
    return [c for c in lab.standin.of("chat.postMessage") if "GPU health" in str(c.params.get("text"))]


async def test_exactly_one_post_per_schedule_across_replicas(replicas):
    lab, one, two, clock = replicas
    clock.now = at("2026-12-03 08:31")
    first, second = await asyncio.gather(one.tick(), two.tick())
    assert first.posted + second.posted == ["morning:2026-12-03"]
    assert first.sampled != second.sampled  # one replica sampled this slot
    clock.now = at("2026-12-03 09:40")
    again = await asyncio.gather(one.tick(), two.tick())
    assert [r.posted for r in again] == [[], []]
    assert len(health_posts(lab)) == 1
    upload = [c for c in lab.standin.of("upload")]
    assert len(upload) == 1 and upload[0].params["content"].count(b"\x89PNG") == 1


async def test_a_health_post_whose_chart_slack_refuses_is_posted_once_not_on_every_tick(replicas, caplog):
    """The report went out; its chart did not (the app lacks files:write): the post is not sent again on every
    tick, as one that never went out would be, and the log says why the chart is missing."""
    lab, one, two, clock = replicas
    lab.standin.fail["files.getUploadURLExternal"] = "missing_scope"
    for minutes in (31, 32, 33):
        clock.now = at(f"2026-12-03 08:{minutes}")
        await asyncio.gather(one.tick(), two.tick())
    assert len(health_posts(lab)) == 1
    assert "chart of health post" in caplog.text and "missing_scope" in caplog.text


async def test_a_health_post_to_a_channel_the_bot_is_not_in_is_not_read_and_tried_on_every_tick(replicas, caplog):
    """Slack will never take a post there (the bot is not in the channel): the occurrence is not given back, so the
    nodes are not read again and the same refusal is not logged every 30 s; the log says what to do. A refusal for
    a passing reason is tried again on the next tick."""
    lab, one, two, clock = replicas
    lab.standin.fail["chat.postMessage"] = "not_in_channel"
    for minutes in (31, 32, 33):
        clock.now = at(f"2026-12-03 08:{minutes}")
        await asyncio.gather(one.tick(), two.tick())
    assert len(health_posts(lab)) == 1 and not health_posts(lab)[0].delivered
    assert "health post post:morning:2026-12-03 cannot be sent to C0OPS (not_in_channel)" in caplog.text
    lab.standin.fail["chat.postMessage"] = "internal_error"
    for minutes in (31, 32):
        clock.now = at(f"2026-12-04 08:{minutes}")
        await asyncio.gather(one.tick(), two.tick())
    assert len(health_posts(lab)) == 3


async def test_a_health_post_in_parts_whose_later_part_slack_refuses_sends_only_the_rest_on_the_next_tick(replicas):
    """A report too long for one message goes in parts. When Slack takes the first and refuses the next (a passing
    internal_error), the next tick sends the parts not yet sent, and no part twice; the chart goes under the first."""
    lab, one, two, clock = replicas
    # yesterday's report named 900 targets unreachable that are not now: today's says each is reachable again
    await one.health.save_report("morning", {"gpus": [], "unreachable": [f"ct-{n:03d}: ssh: no route to host"
                                                                           for n in range(900)]})
    lab.standin.fail_if["chat.postMessage"] = lambda params: (
        "internal_error" if "(part 2/" in str(params.get("text")) else None)
    clock.now = at("2026-12-03 08:31")
    await asyncio.gather(one.tick(), two.tick())
    tried = [c.params["text"] for c in health_posts(lab)]
    parts = int(re.search(r"part 1/(\d+)", tried[0]).group(1))
    assert parts >= 3 and [c.delivered for c in health_posts(lab)] == [True, False]
    del lab.standin.fail_if["chat.postMessage"]
    for minutes in (32, 33):
        clock.now = at(f"2026-12-03 08:{minutes}")
        await asyncio.gather(one.tick(), two.tick())
    delivered = [c for c in health_posts(lab) if c.delivered]
    assert [re.search(r"part \d+/\d+", c.params["text"]).group(0) for c in delivered] == [
        f"part {n}/{parts}" for n in range(1, parts + 1)]  # each once, in order
    said = "\n".join(blocks_to_text(c.blocks) for c in delivered)
    assert all(f"reachable again: ct-{n:03d}" in said for n in range(900))
    (upload,) = lab.standin.of("files.completeUploadExternal")
    assert upload.params["thread_ts"] == delivered[0].answer["ts"]
    recorded = await one.health.last_report("morning")  # today's report is the one recorded, once it all went out
    assert recorded["unreachable"] and not any(u.startswith("ct-") for u in recorded["unreachable"])


async def test_a_post_missed_while_all_replicas_were_down_is_sent_late_once(replicas):
    lab, one, two, clock = replicas
    clock.now = at("2026-12-03 11:55")  # everyone was down at 08:30
    results = await asyncio.gather(one.tick(), two.tick())
    assert sum(len(r.posted) for r in results) == 1
    clock.now = at("2026-12-04 15:00")  # the next day's occurrence was missed beyond the grace window
    results = await asyncio.gather(one.tick(), two.tick())
    assert sum(len(r.posted) for r in results) == 0
    assert len(health_posts(lab)) == 1


async def test_report_from_recorded_samples_names_idle_held_gpus_and_unreachable_nodes(replicas):
    lab, one, two, clock = replicas
    holder = lab.nodes["pve5"].spawn_holder(0, "python3 -m sglang.launch_server", 30000, 129)
    for minutes in range(0, 181, 30):  # three hours of samples, every 30 min, whichever replica claims the slot
        clock.now = at("2026-12-03 05:00") + minutes * 60
        await asyncio.gather(one.tick(), two.tick())
    # the real MMU-fault line of tests/fixtures/kernel-log, as it would read on GPU 0 of this node
    mmu_fault = XID_LINES[-1].split("XID: ", 1)[1].replace("PCI:0000:00:06", "PCI:0000:4f:00")
    state = lab.nodes["pve5"].read_state()
    state["kernel_log"] = [f"2026-12-03T07:10:00+0000 pve5 kernel: {mmu_fault}"]
    lab.nodes["pve5"].write_state(state)
    clock.now = at("2026-12-03 08:31")
    await one.tick() if (await two.tick()).posted == [] else None
    post = health_posts(lab)[-1]
    text = blocks_to_text(post.blocks)
    # samples from 05:00 to 08:30, and the post itself reads the GPUs at 08:31: 3.5 h held while idle
    assert "pve5 GPU 0: memory held while idle for 3.5 h — CT 129 30000 MiB" in text
    assert "[X] pve7:" in text and "pve6" in text  # unreachable and nvidia-smi error: named, not dropped
    assert "pve5 GPU 0: Xid 31 once, GPU memory page fault (MMU fault) (application-caused)" in text
    normalised = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    normalised = re.sub(r"\('127\.0\.0\.1', \d+\)", "('127.0.0.1', PORT)", normalised)
    normalised = re.sub(rf"\b{holder}\b", "PID", normalised)
    check_golden("health_post.txt", normalised + "\n")
    os.kill(holder, 0)


async def test_a_gpu_held_idle_by_a_failed_launchs_server_is_named_with_the_stop_that_frees_it(replicas):
    """A launch that failed its health check left its server running; hours later the daily post names that attempt
    as what holds the idle GPUs, and the stop that frees them, where before it said only "CT 129"."""
    lab, one, two, clock = replicas
    from tests.handlers.test_launch_flow import SEED, model, wait_text

    lab.nodes["pve5"].set_scenario(129, ["unhealthy"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "— *failed*", method="chat.update")
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert attempt.left_running
    for minutes in range(0, 181, 30):
        clock.now = at("2026-12-03 05:00") + minutes * 60
        await asyncio.gather(one.tick(), two.tick())
    clock.now = at("2026-12-03 08:31")
    await one.tick() if (await two.tick()).posted == [] else None
    text = blocks_to_text(health_posts(lab)[-1].blocks)
    for gpu in (0, 1):
        assert re.search(rf"pve5 GPU {gpu}: memory held while idle for 3\.5 h — CT 129 \d+ MiB \({attempt.id} "
                         rf"\(failed, left running, port 30000\): a failed launch's server, `/sglang stop "
                         rf"{attempt.id}` frees it\)", text), text


async def test_a_dead_replicas_launch_tracking_is_taken_over(replicas):
    lab, one, two, clock = replicas
    from tests.handlers.test_launch_flow import model, wait_text

    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --tp 2 --mem-fraction-static 0.88 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "Launch `a", method="chat.postMessage")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    for _ in range(100):
        if lab.services.tasks:
            break
        await asyncio.sleep(0.05)
    lab.services.stopping.set()  # replica A goes away; its lease lapses
    await asyncio.wait(list(lab.services.tasks), timeout=10)
    assert await two.take_over() == [attempt.id]
    for _ in range(100):
        holder = await lab.services.store.redis.get(f"gpuops:tracker:{attempt.id}")
        if holder:
            break
        await asyncio.sleep(0.05)
    assert holder == two.services.replica
    assert await two.take_over() == []  # followed once


async def ready_server(lab):
    """A launch of the seed model with the remedy that fits, come up ready in the lab."""
    from tests.handlers.test_launch_flow import SEED, model, wait_text

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16", user_id="U0ALICE")
    await wait_text(lab, "*ready*")
    return (await lab.services.attempts.recent("pve5", 129, 1))[0]


async def killed_and_sampled(attempt, replicas, found="exited"):
    """The server's process group killed (the stand-in this test's lab started), then one sampling slot on both
    replicas: one of them samples, and finds it gone (in its tick's ``found`` list). Returns both ticks."""
    import signal

    _, one, two, clock = replicas
    os.killpg(attempt.pid, signal.SIGKILL)
    for _ in range(100):
        try:
            os.kill(attempt.pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    clock.now = at("2026-12-03 06:10")
    first, second = await one.tick(), await two.tick()
    assert sorted(getattr(first, found) + getattr(second, found)) == [attempt.id]
    return first, second


async def test_a_ready_server_whose_process_exits_is_announced_once_in_its_thread(replicas):
    """The sampler notices a ready server's process is gone: the attempt is recorded as failed and its
    thread (and channel) told what its own log shows first, once across replicas."""

    from tests.conftest import ROOT
    from tests.edges.test_cli import long_serving_log

    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    assert attempt.status.value == "ready" and attempt.pid
    served = long_serving_log(FIXTURES / "sglang-failures/cases.jsonl", ROOT / "bot/lab/data/logs", 50)
    with open(attempt.log_path, "a") as log:  # it served, then hung until the watchdog ended it
        log.write(served.split("\n", 40)[-1])
    await killed_and_sampled(attempt, replicas)
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.status.value == "failed"
    assert f"(PID {attempt.pid}) exited while serving" in stored.transitions[-1].note
    posts = [c for c in lab.standin.of("chat.postMessage") if "exited while serving" in str(c.params.get("text"))]
    assert len(posts) == 1 and posts[0].params["thread_ts"] == attempt.thread_ts
    assert posts[0].params.get("reply_broadcast") in (True, "true", "1")  # the channel sees it too
    text = blocks_to_text(posts[0].blocks)
    assert "First cause in its log: *watchdog_timeout*" in text and "Watchdog timeout (self.watchdog_timeout=300)" \
        in text and f"/sglang triage {attempt.id}" in text
    # its launch card no longer says ready, and the history carries the line that proves the cause
    card = [c for c in lab.standin.of("chat.update") if c.params.get("ts") == attempt.message_ts][-1]
    assert "*failed*" in blocks_to_text(card.blocks) and "first error: `" in blocks_to_text(card.blocks)
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.error_line and stored.error_line in text  # the first line the announcement quoted
    clock.now = at("2026-12-03 06:50")  # the next slot: already recorded, nothing more
    assert (await one.tick()).exited == [] and (await two.tick()).exited == []


async def test_an_exited_server_whose_announcement_slack_refused_still_has_its_card_say_failed(replicas):
    """Slack refusing the exit's announcement (a passing internal_error) does not leave the launch card saying
    ready: the card is drawn from the attempt's record, with the stages and figures it reached (not the stages of
    the log excerpt the announcement reads)."""
    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    lab.standin.fail["chat.postMessage"] = "internal_error"
    before = len(lab.standin.calls)
    await killed_and_sampled(attempt, replicas)
    refused = [c for c in lab.standin.calls[before:] if c.method == "chat.postMessage"]
    assert any("exited while serving" in str(c.params.get("text")) for c in refused)
    cards = [blocks_to_text(c.blocks) for c in lab.standin.calls[before:]
             if c.method == "chat.update" and c.params.get("ts") == attempt.message_ts]
    assert len(cards) == 1 and "— *failed*" in cards[0] and ":white_check_mark: ready" in cards[0]
    assert f"KV pool {attempt.observed['kv_tokens']:,} tokens observed" in cards[0]


async def test_a_ready_server_launched_from_a_terminal_that_exits_is_recorded_and_posted_nowhere(replicas, caplog):
    """`gpuops launch` records no channel (the terminal was told): the sampler still records the exit, and sends
    Slack nothing for it, rather than a post to no channel that fails."""
    from dataclasses import replace

    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    await lab.services.attempts.save(replace(attempt, user="cli:root", channel="", message_ts=None, thread_ts=None))
    calls_before = len(lab.standin.calls)
    await killed_and_sampled(attempt, replicas)
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.status.value == "failed" and "exited while serving" in stored.transitions[-1].note
    sent = [c for c in lab.standin.calls[calls_before:] if c.method in ("chat.postMessage", "chat.update")]
    assert not [c for c in sent if not c.params.get("channel")], sent
    assert "announcing exited server" not in caplog.text


async def test_a_ready_server_the_oom_killer_ended_is_announced_with_the_kill_as_its_cause(replicas):
    """A serving server killed by the kernel writes nothing: its announcement names the kill from the node's
    kernel log, which the lab's kernel stand-in writes as the kernel words it."""

    from bot.lab.fake_sglang import record_oom_kill

    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    record_oom_kill(lab.nodes["pve5"].state_dir / "node.json", "129", attempt.pid, 60 * 1024 * 1024)
    await killed_and_sampled(attempt, replicas)
    post = [c for c in lab.standin.of("chat.postMessage") if "exited while serving" in str(c.params.get("text"))][-1]
    text = blocks_to_text(post.blocks)
    assert "First cause from the node's kernel log: *host_oom_kill*" in text
    assert f"killed PID {attempt.pid} (python3) in CT 129 while this launch ran: CT 129 reached its memory limit" \
        in text
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.error_line.startswith(f"the kernel's OOM killer killed PID {attempt.pid} (python3) in CT 129")


async def test_a_ready_server_whose_pid_is_another_processs_now_is_noticed_gone(replicas):
    """The number a server's PID had can come round to another process (its container restarted, say): the server
    is told by its output going to the attempt's own log, so the sampler finds it gone rather than serving."""
    import signal
    import subprocess
    from dataclasses import replace

    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    os.killpg(attempt.pid, signal.SIGKILL)  # the stand-in this test's lab started
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        await lab.services.attempts.save(replace(attempt, pid=other.pid))
        clock.now = at("2026-12-03 06:10")
        first, second = await one.tick(), await two.tick()
        assert sorted(first.exited + second.exited) == [attempt.id]
        stored = await lab.services.attempts.get(attempt.id)
        assert stored.status.value == "failed"
        assert (f"the server's process (PID {other.pid}, another process's now) exited while serving"
                in stored.transitions[-1].note)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


async def test_a_ready_server_that_lives_but_stops_answering_is_announced_once(replicas):
    import signal

    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    clock.now = at("2026-12-03 07:10")
    assert (await one.tick()).unanswering == []  # it answers
    os.kill(attempt.pid, signal.SIGUSR1)  # the stand-in this test's lab started: it lives, but answers 503
    results = []
    for slot in ("07:40", "08:10", "08:40"):  # one sample per slot, on whichever replica claims it
        clock.now = at(f"2026-12-03 {slot}")
        results.append((await one.tick()).unanswering + (await two.tick()).unanswering)
    assert results == [[], [attempt.id], []]  # announced on the second miss in a row, and only then
    posts = [c for c in lab.standin.of("chat.postMessage") if "is not answering" in str(c.params.get("text"))]
    assert len(posts) == 1 and posts[0].params["thread_ts"] == attempt.thread_ts
    text = blocks_to_text(posts[0].blocks)
    assert f"PID {attempt.pid}, still runs" in text and "503" in text and f"/sglang stop {attempt.id}" in text
    assert (await lab.services.attempts.get(attempt.id)).status.value == "ready"  # alive: not called failed


async def test_a_not_answering_server_whose_announcement_slack_refused_is_announced_on_the_next_sample(replicas):
    """The second miss in a row is announced; when Slack refuses that post (a passing internal_error), the next
    sample that still misses announces it, and once it has been said, no later one does."""
    import signal

    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    os.kill(attempt.pid, signal.SIGUSR1)  # the stand-in this test's lab started: it lives, but answers 503
    results = []
    for slot in ("07:40", "08:10", "08:40", "09:10"):
        lab.standin.fail.pop("chat.postMessage", None)
        if slot == "08:10":
            lab.standin.fail["chat.postMessage"] = "internal_error"
        clock.now = at(f"2026-12-03 {slot}")
        results.append((await one.tick()).unanswering + (await two.tick()).unanswering)
    assert results == [[], [], [attempt.id], []], results
    said = [c for c in lab.standin.of("chat.postMessage") if "is not answering" in str(c.params.get("text"))]
    assert [c.answer.get("ok") for c in said] == [False, True]


@pytest.mark.parametrize("gone, said", [("stopped", "its container 129 is not running while serving"),
                                         ("destroyed", "its container 129 is gone from pve5 while serving")])
async def test_a_ready_server_whose_container_stopped_is_announced_as_gone(replicas, gone, said):
    """`pct exec` answers "CT 129 not running" for a stopped container, and "Configuration file ... does not exist"
    for one destroyed: either way no server runs there (before, a destroyed one was left for later, never decided)."""
    lab, one, two, clock = replicas
    attempt = await ready_server(lab)
    state = lab.nodes["pve5"].read_state()
    if gone == "stopped":
        state["containers"]["129"]["status"] = "stopped"
    else:
        state["containers"].pop("129")
    lab.nodes["pve5"].write_state(state)
    clock.now = at("2026-12-03 09:10")
    assert sorted((await one.tick()).exited + (await two.tick()).exited) == [attempt.id]
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.status.value == "failed" and said in stored.transitions[-1].note
    post = [c for c in lab.standin.of("chat.postMessage") if "exited while serving" in str(c.params.get("text"))][-1]
    assert "Its log could not be read now" in blocks_to_text(post.blocks)


async def test_a_ready_server_that_answers_slowly_is_announced_once(replicas):
    import signal

    lab, one, two, clock = replicas
    one.slow_answer_s = two.slow_answer_s = 0.5
    attempt = await ready_server(lab)
    clock.now = at("2026-12-03 07:10")
    first = await one.tick()
    assert first.slow == [] and first.unanswering == []  # it answers, fast
    os.kill(attempt.pid, signal.SIGUSR2)  # the stand-in this test's lab started: each generation now takes 1 s
    results = []
    for slot in ("07:40", "08:10", "08:40"):  # one sample per slot, on whichever replica claims it
        clock.now = at(f"2026-12-03 {slot}")
        a, b = await one.tick(), await two.tick()
        assert a.unanswering + b.unanswering == []  # it does answer
        results.append(a.slow + b.slow)
    assert results == [[], [attempt.id], []]  # announced on the second slow answer in a row, and only then
    posts = [c for c in lab.standin.of("chat.postMessage") if "answers slowly" in str(c.params.get("text"))]
    assert len(posts) == 1 and posts[0].params["thread_ts"] == attempt.thread_ts
    assert posts[0].params.get("reply_broadcast") in (True, "true", "1")
    text = blocks_to_text(posts[0].blocks)
    assert "took over 0.5 s on two samples in a row" in text and f"/gpu status {attempt.target_label}" in text
    seconds = float(re.search(r"\((\d+\.\d) s at \d\d:\d\d UTC", text).group(1))
    assert 1.0 <= seconds < 30  # the stand-in's 1 s, as the probe timed it
    # the daily post's server line says it too, with the time the probe measured
    report = await one.report("all", "t", clock.now)
    line = next(f for f in report.findings if attempt.id in f)
    assert "answers, but SLOWLY: 8 tokens took" in line and "(over 0.5 s)" in line
    assert (await lab.services.attempts.get(attempt.id)).status.value == "ready"  # slow is not failed


async def test_the_report_names_a_container_whose_cuda_devices_are_not_in_order(replicas):
    """A node rebooted without nvidia-uvm: the container's optional bind left the empty file create=file made, and
    its nvidia-smi still answers. The daily report reads every listed container on the nodes that answered and says
    so before anyone launches there; a container in order adds nothing."""
    lab, one, _, clock = replicas
    clean = await one.report("all", "test", clock.now)
    assert not [f for f in clean.findings if "CUDA devices" in f]
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["dev_nodes"]["/dev/nvidia-uvm"] = ["regular empty file", 0, 0]
    lab.nodes["pve5"].write_state(state)
    for spec in ("all", "pve5", "sglang-a6000"):
        before = len(lab.nodes["pve5"].calls())
        report = await one.report(spec, "test", clock.now)
        found = [f for f in report.findings if "CUDA devices" in f]
        assert len(found) == 1 and found[0].startswith(
            "pve5:129 (sglang-a6000): CUDA devices: inside CT 129, /dev/nvidia-uvm (regular empty file): not the "
            "device node(s) its config passes"), (spec, found)
        # read once per report: a container target's own status read carries the check
        stats = [c for c in lab.nodes["pve5"].calls()[before:] if c[:2] == ["pct", "exec"] and "stat" in c]
        assert len(stats) == 1, (spec, stats)
    assert not [f for f in (await one.report("pve6", "test", clock.now)).findings if "CUDA devices" in f]


async def test_a_server_a_failed_launch_left_running_that_exits_is_recorded_once_and_no_longer_stoppable(replicas):
    """A launch that failed its health check left its server running; when that server ends by itself, the sampler
    records it on the attempt (still failed), once across replicas: the card stops saying it holds the GPUs, and a
    stop of the container no longer finds it."""
    from tests.handlers.test_launch_flow import SEED, model, wait_text

    lab, one, two, clock = replicas
    lab.nodes["pve5"].set_scenario(129, ["unhealthy"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 "
                               "--mamba-ssm-dtype bfloat16")
    await wait_text(lab, "— *failed*")
    (attempt,) = await lab.services.attempts.recent("pve5", 129, 1)
    assert attempt.left_running
    clock.now = at("2026-12-03 05:40")  # alive at this slot: nothing recorded
    assert (await one.tick()).ended == [] and (await two.tick()).ended == []
    first, second = await killed_and_sampled(attempt, replicas, found="ended")
    assert first.exited + second.exited == []
    stored = await lab.services.attempts.get(attempt.id)
    assert stored.status.value == "failed" and not stored.left_running
    card = blocks_to_text([c for c in lab.standin.of("chat.update") if c.delivered
                           and c.params.get("ts") == attempt.message_ts][-1].blocks)
    assert (f"its server, left running, then ended on its own: the server's process (PID {attempt.pid}) exited "
            "(noticed 06:10 UTC)") in card and "was left running" not in card
    before = len(lab.standin.calls)
    await lab.slash("/sglang", "stop sglang-a6000")
    said = await lab.standin.wait_for(lambda cs: any(c.method == "response_url" for c in cs[before:]), 30)
    assert "no running attempt on pve5:129" in [c for c in said[before:] if c.method == "response_url"][0].params[
        "text"]
    clock.now = at("2026-12-03 06:50")  # the next slot: already recorded, nothing more
    assert (await one.tick()).ended == [] and (await two.tick()).ended == []


async def test_a_stopped_container_is_posted_as_stopped_not_as_a_fault_and_its_return_is_named(lab):
    """A schedule over one container, which someone stopped: the post lists it as stopped (the node's words, a white
    circle), apart from what did not answer, and the next day's post, with it running again, says so by its name."""
    schedules = {"morning": ScheduledPost(channel="C0OPS", at="08:30", timezone="UTC", targets="sglang-a6000")}
    lab.services.inventory = lab.services.inventory.model_copy(update={"schedules": schedules})
    clock = Clock(at("2026-12-03 08:31"))
    scheduler = Scheduler(lab.services, lab.app.client, clock, sample_interval_s=1800)
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["status"] = "stopped"
    lab.nodes["pve5"].write_state(state)
    assert (await scheduler.tick()).posted == ["morning:2026-12-03"]
    post = health_posts(lab)[-1]
    text = blocks_to_text(post.blocks)
    assert ("*Stopped now* (the node says so; nothing in them holds a GPU):\n[-] pve5:129 (sglang-a6000): container "
            "129 on pve5 is not running") in text, text
    assert "Not read now" not in text and "[X]" not in text
    assert post.params["text"] == "GPU health: 0 GPUs, 0 findings, 0 not read, 1 stopped"
    state["containers"]["129"]["status"] = "running"
    lab.nodes["pve5"].write_state(state)
    clock.now = at("2026-12-04 08:31")
    assert (await scheduler.tick()).posted == ["morning:2026-12-04"]
    text = blocks_to_text(health_posts(lab)[-1].blocks)
    assert "running again: pve5:129 (sglang-a6000)" in text and "Stopped now" not in text, text
