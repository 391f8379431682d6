"""The hypothesis-test loop in an incident thread, through signed Events API deliveries."""

import asyncio

from bot.lab.console import CHANNEL
from bot.views import blocks_to_text
from tests.handlers.test_launch_flow import wait_text
from tests.handlers.test_triage import failed_launch


def summary_text(calls, ts):
    edits = [c for c in calls if c.delivered and (c.params.get("ts") == ts or c.answer.get("ts") == ts)]
    return blocks_to_text(edits[-1].blocks)


async def test_hypotheses_are_recorded_and_decided_in_the_thread(lab):
    first = await failed_launch(lab, "kv_pool_oom")
    thread = first.thread_ts
    assert await lab.mention("hypothesis leftover GPU memory from an earlier run", thread) == 200
    calls = await wait_text(lab, "Incident summary", method="chat.postMessage")
    summary = next(c for c in calls if c.method == "chat.postMessage"
                   and "Incident summary" in blocks_to_text(c.blocks))
    summary_ts = summary.answer["ts"]
    assert summary.params["thread_ts"] == thread
    assert "*H1* leftover GPU memory from an earlier run" in blocks_to_text(summary.blocks)
    assert first.id in blocks_to_text(summary.blocks)

    await lab.mention("status", thread)
    calls = await wait_text(lab, "GPUs clean", method="chat.update")
    # the observation quotes the readings the hypothesis will be decided on
    assert "GPUs clean: pve5: GPU 0 1/49140 MiB, GPU 1 1/49140 MiB, no compute process" in summary_text(
        calls, summary_ts)
    second = await failed_launch(lab, "kv_pool_oom")  # same failure on clean GPUs
    # the failure itself updates the thread (no word needed there): H1 is refuted by the evidence
    calls = await wait_text(lab, "refuted by gpuops", method="chat.update")
    text = summary_text(calls, summary_ts)
    assert "*H1* leftover GPU memory" in text and "refuted by gpuops: the GPUs were clean" in text
    assert f"repeated in {second.id}" in text
    await lab.mention("triage", thread)
    calls = await wait_text(lab, "the first cause is kv_pool_oom", method="chat.update")
    assert "the first cause is kv_pool_oom" in summary_text(calls, summary_ts)  # proposed by the triage
    posted = [c for c in calls if c.method == "chat.postMessage" and "Incident summary" in blocks_to_text(c.blocks)]
    assert len(posted) == 1  # one summary, edited in place

    await lab.mention("confirm H2 the pool is too small at 0.85", thread)
    calls = await wait_text(lab, "confirmed by", method="chat.update")
    assert "*H2* the first cause is kv_pool_oom" in summary_text(calls, summary_ts)


async def test_a_relaunch_given_up_on_that_comes_up_after_all_refutes_no_hypothesis(lab):
    """A failure, a hypothesis of leftover memory, clean GPUs; then a relaunch silent past the stall timeout that
    comes up after all. Given up on, it was no repeat of the failure: the hypothesis stays open. Before, the give-up
    refuted it ("the failure repeated in" an attempt that then served) and its coming up left that on record."""
    from tests.handlers.test_launch_flow import SEED, model

    first = await failed_launch(lab, "kv_pool_oom")
    thread = first.thread_ts
    await lab.mention_answered("hypothesis leftover GPU memory from an earlier run", thread)
    await lab.mention_answered("status", thread)
    lab.services.settings = lab.services.settings.model_copy(update={"stall_timeout_s": 1.5})
    lab.nodes["pve5"].set_scenario(129, ["slow_load"], delay_s=0.02, pause_s=5)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 --force",
                    user_id="U0ADMIN")
    calls = await wait_text(lab, "gave up on it; healthy", method="chat.update")
    relaunch = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert relaunch.status.value == "ready" and relaunch.observed["came_up_late_s"] >= 1
    for _ in range(100):  # the thread's summary, brought up to date once the relaunch came up
        incident = await lab.services.incidents.get(CHANNEL, thread)
        if relaunch.id in incident.attempts:
            break
        await asyncio.sleep(0.1)
    assert [(o.attempt, o.outcome) for o in incident.observations if o.kind == "attempt"] == [
        (first.id, "failed"), (relaunch.id, "ready")]
    assert incident.hypotheses[0].status == "open", incident.hypotheses[0].why
    calls = lab.standin.calls
    text = summary_text(calls, next(c.answer["ts"] for c in calls if c.method == "chat.postMessage"
                                    and "Incident summary" in blocks_to_text(c.blocks)))
    assert f"`{relaunch.id}` ready" in text and "refuted" not in text, text


async def test_a_relaunch_given_up_on_and_watched_to_the_end_then_decides_as_the_failure_it_is(lab):
    """Given up on as hung and watched for the launch timeout without coming up: once the watch is over, the bot's
    next tick takes it into the thread as a failure on clean GPUs, which refutes the leftover-memory hypothesis."""
    from bot.scheduler import Scheduler
    from tests.handlers.test_launch_flow import SEED, model

    first = await failed_launch(lab, "kv_pool_oom")
    thread = first.thread_ts
    await lab.mention_answered("hypothesis leftover GPU memory from an earlier run", thread)
    await lab.mention_answered("status", thread)
    lab.services.settings = lab.services.settings.model_copy(update={"stall_timeout_s": 1.5, "launch_timeout_s": 3})
    lab.nodes["pve5"].set_scenario(129, ["hang"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 --force",
                    user_id="U0ADMIN")
    await wait_text(lab, "gpuops reads its log on until", method="chat.update")
    relaunch = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert relaunch.given_up_at is not None
    incident = await lab.services.incidents.get(CHANNEL, thread)
    assert relaunch.id not in incident.attempts and incident.hypotheses[0].status == "open"  # it may yet come up
    for _ in range(100):  # the watch ends, and the bot's next tick brings the thread up to date
        await asyncio.sleep(0.1)
        await Scheduler(lab.services, lab.app.client).update_threads()
        incident = await lab.services.incidents.get(CHANNEL, thread)
        if relaunch.id in incident.attempts:
            break
    assert incident.observations[-1].outcome == "failed"
    decided = incident.hypotheses[0]
    assert (decided.status, decided.tested_by) == ("refuted", (relaunch.id,)), decided
    assert f"the failure repeated in {relaunch.id}" in decided.why


async def test_a_retried_event_is_handled_once(lab):
    first = await failed_launch(lab, "kv_pool_oom")
    await lab.mention("note tried a second time", first.thread_ts, event_id="Ev0SAME")
    await lab.mention("note tried a second time", first.thread_ts, event_id="Ev0SAME")
    await wait_text(lab, "Incident summary", method="chat.postMessage")
    incident = await lab.services.incidents.get("C0LAB", first.thread_ts)
    assert [o.text for o in incident.observations if o.kind == "note"] == ["<@U0ALICE>: tried a second time"]


async def test_the_triage_experiment_decides_its_hypothesis_in_the_thread(lab):
    from tests.handlers.test_launch_flow import buttons, post_with

    failed = await failed_launch(lab, "torch_compile_error", "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    thread = failed.thread_ts
    await lab.mention("triage", thread)
    calls = await wait_text(lab, "the first cause is torch_compile_error", method="chat.postMessage")
    report = post_with(calls, "Triage of")
    choice = next(b for b in buttons(report) if b["text"]["text"] == "launch with drop --enable-torch-compile")
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.click(choice["action_id"], choice["value"])
    await wait_text(lab, "*ready*")
    # no word in the thread is needed: the launch finishing brings the thread's summary up to date
    calls = await wait_text(lab, "confirmed by gpuops", method="chat.update")
    text = blocks_to_text([c for c in calls if c.method == "chat.update" and "Incident summary"
                           in blocks_to_text(c.blocks)][-1].blocks)
    assert "the first cause is torch_compile_error" in text
    assert "`- --enable-torch-compile (on)` started: the failure went with it" in text


async def test_a_slash_triage_answered_in_an_incident_thread_proposes_its_hypothesis_there(lab):
    """`/sglang triage` from the channel answers in the attempt's thread; when that thread is an incident, the
    triage's first cause is its hypothesis and the summary shows it at once, as `@gpuops triage` would."""
    failed = await failed_launch(lab, "kv_pool_oom")
    await lab.mention("note looking at this one", failed.thread_ts)
    calls = await wait_text(lab, "Incident summary", method="chat.postMessage")
    summary_ts = next(c for c in calls if c.method == "chat.postMessage"
                      and "Incident summary" in blocks_to_text(c.blocks)).answer["ts"]
    await lab.slash("/sglang", f"triage {failed.id}", user_id="U0EVE")
    calls = await wait_text(lab, "the first cause is kv_pool_oom", method="chat.update")
    text = summary_text(calls, summary_ts)
    assert "*H1* the first cause is kv_pool_oom (proposed by triage of" in text
    assert f"`{failed.id}` failed" in text and "triage: kv_pool_oom" in text
    incident = await lab.services.incidents.get(failed.channel, failed.thread_ts)
    assert [h.text for h in incident.hypotheses] == [f"the first cause is kv_pool_oom (proposed by triage of "
                                                     f"{failed.id})"]

    def edits(cs):
        return sum(1 for c in cs if c.method == "chat.update" and c.params.get("ts") == summary_ts)

    before = edits(lab.standin.calls)
    await lab.slash("/sglang", f"triage {failed.id}", user_id="U0EVE")  # again: no second hypothesis
    calls = await lab.standin.wait_for(lambda cs: edits(cs) > before, 30)  # the summary was refreshed after it
    assert sum(1 for c in calls if c.method == "chat.postMessage" and "Triage of" in blocks_to_text(c.blocks)) == 2
    assert len((await lab.services.incidents.get(failed.channel, failed.thread_ts)).hypotheses) == 1


def free_leftover(node, pid):
    """The leftover process gone from the node (as /gpu free would make it after its confirmation)."""
    state = node.read_state()
    state["processes"] = [p for p in state["processes"] if p["pid"] != pid]
    node.write_state(state)


async def relaunch_until_confirmed(lab):
    """The failed launch again with its own flags (forced past the budget check, as the first was), up to ready,
    and the thread's summary once the evidence confirmed a hypothesis: (the new attempt, the summary's text)."""
    from tests.handlers.test_launch_flow import SEED, model

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {SEED} --mem-fraction-static 0.85 --force",
                    user_id="U0ADMIN")
    await wait_text(lab, "*ready*")
    latest = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    calls = await wait_text(lab, "confirmed by gpuops", method="chat.update")
    return latest, blocks_to_text([c for c in calls if c.method == "chat.update" and "Incident summary"
                                   in blocks_to_text(c.blocks)][-1].blocks)


async def test_leftover_memory_seen_freed_and_an_unchanged_relaunch_that_starts_confirm_the_hypothesis(lab):

    node = lab.nodes["pve5"]
    node.add_process(424242, 0, "python3", 30000, 129)  # an earlier run's leftover on GPU 0 of CT 129
    first = await failed_launch(lab, "gpu_memory_occupied")
    thread = first.thread_ts
    # two mentions in quick succession (Slack delivers them concurrently): both land in the one record and summary
    await lab.mention("hypothesis leftover memory from the earlier run", thread)
    await lab.mention("status", thread)
    calls = await wait_text(lab, "GPUs not clean", method="chat.update")
    summaries = [c for c in calls if c.method == "chat.postMessage" and "Incident summary" in blocks_to_text(c.blocks)]
    assert len(summaries) == 1
    text = summary_text(calls, summaries[0].answer["ts"])
    assert "*H1* leftover memory from the earlier run" in text and "GPUs not clean: pve5: GPU 0 30001/49140" in text
    free_leftover(node, 424242)
    await lab.mention("status", thread)
    await wait_text(lab, "GPUs clean", method="chat.update")
    # the same launch again, unchanged: it records "same flags as the previous attempt", and it starts
    latest, text = await relaunch_until_confirmed(lab)
    assert latest.changes == ("same flags as the previous attempt",)
    assert "*H1* leftover memory from the earlier run" in text
    assert f"and {latest.id} started with the same flags" in text


async def test_the_triages_own_reading_and_the_relaunchs_pre_flight_decide_leftovers_without_a_status(lab):
    """The seed story's loop with no `@gpuops status` in it: the triage's snapshot shows the leftover, it is freed,
    and the unchanged relaunch, whose pre-flight read its GPUs clean, starts."""

    node = lab.nodes["pve5"]
    node.add_process(424242, 0, "python3", 30000, 129)  # an earlier run's leftover on GPU 0 of CT 129
    first = await failed_launch(lab, "gpu_memory_occupied")
    thread = first.thread_ts
    await lab.mention("triage", thread)
    calls = await wait_text(lab, "triage's reading", method="chat.postMessage")  # the thread's first summary
    text = blocks_to_text(next(c for c in calls if c.method == "chat.postMessage"
                               and "Incident summary" in blocks_to_text(c.blocks)).blocks)
    assert "the first cause is gpu_memory_occupied" in text
    assert "triage's reading: GPUs not clean: pve5: GPU 0 30001/49140 MiB" in text
    free_leftover(node, 424242)
    latest, text = await relaunch_until_confirmed(lab)
    assert latest.found_gpus_clean is True and latest.changes == ("same flags as the previous attempt",)
    assert "the first cause is gpu_memory_occupied" in text
    assert f"freed ({latest.id}'s pre-flight found them clean) and {latest.id} started with the same flags" in text


async def test_a_launch_the_oom_killer_ended_is_confirmed_in_the_thread_once_the_raised_limit_lets_it_start(lab):

    failed = await failed_launch(lab, "host_oom_kill")
    assert failed.observed["ct_memory_mib"] == 65536  # the limit its pre-flight read
    thread = failed.thread_ts
    await lab.mention("triage", thread)
    await wait_text(lab, "the first cause is host_oom_kill", method="chat.postMessage")
    node = lab.nodes["pve5"]
    state = node.read_state()  # `pct set 129 -memory 131072` on the node
    state["containers"]["129"]["memory_mib"] = 131072
    node.write_state(state)
    latest, text = await relaunch_until_confirmed(lab)
    assert latest.changes == ("same flags as the previous attempt", "CT memory 64.0 GiB -> 128.0 GiB")
    assert "the first cause is host_oom_kill" in text
    assert f"{latest.id} with `CT memory 64.0 GiB -> 128.0 GiB` (a raised limit) started" in text


async def test_a_hypothesis_with_slacks_control_characters_reads_as_typed(lab):
    """Slack delivers `<`, `>` and `&` as entities: the hypothesis is stored and shown as it was typed."""
    first = await failed_launch(lab, "kv_pool_oom")
    typed = "the KV pool < the 65,536 context & the MTP state > 3 GiB"
    assert await lab.mention(f"hypothesis {typed}", first.thread_ts) == 200
    calls = await wait_text(lab, "Incident summary", method="chat.postMessage")
    summary = next(blocks_to_text(c.blocks) for c in calls
                   if c.method == "chat.postMessage" and "Incident summary" in blocks_to_text(c.blocks))
    assert f"*H1* {typed}" in summary
    incident = await lab.services.incidents.get("C0LAB", first.thread_ts)
    assert incident.hypotheses[0].text == typed


async def test_a_hypothesis_whose_reply_slack_refuses_is_kept_and_shown_in_the_summary(lab):
    """Slack refusing the reply that names a new hypothesis (a passing internal_error) does not lose it: it is
    recorded, and the thread's summary (an edit Slack takes) shows it."""
    first, summary_ts = await thread_with_summary(lab, "note the first launch ran at 0.85")
    lab.standin.fail["chat.postMessage"] = "internal_error"
    await lab.mention("hypothesis leftover GPU memory from an earlier run", first.thread_ts)
    calls = await wait_text(lab, "leftover GPU memory", method="chat.update")
    assert "*H1* leftover GPU memory from an earlier run" in summary_text(calls, summary_ts)
    incident = await lab.services.incidents.get("C0LAB", first.thread_ts)
    assert [(h.id, h.text) for h in incident.hypotheses] == [("H1", "leftover GPU memory from an earlier run")]
    refused = [c for c in lab.standin.of("chat.postMessage") if not c.delivered]
    assert any("*H1*" in str(c.params.get("text")) for c in refused)  # the reply was tried


async def test_a_thread_triage_whose_answer_slack_refuses_still_labels_the_attempt(lab):
    """`@gpuops triage` whose answer Slack refuses in the thread (a passing internal_error): the label its reading
    of the log found is recorded on the attempt all the same (the history and the summaries show it)."""
    first, summary_ts = await thread_with_summary(lab, "note the first launch ran at 0.85")
    lab.standin.fail["chat.postMessage"] = "internal_error"
    await lab.mention("triage", first.thread_ts)
    await lab.standin.wait_for(lambda cs: any(not c.delivered and f"*Triage of `{first.id}`*" in blocks_to_text(
        c.blocks) for c in cs), 60)
    for _ in range(100):
        labelled = await lab.services.attempts.get(first.id)
        if labelled.observed.get("triage"):
            break
        await asyncio.sleep(0.1)
    assert labelled.observed.get("triage") == "kv_pool_oom"


async def test_a_thread_status_whose_answer_slack_refuses_is_observed_all_the_same_and_the_person_told(lab):
    """`@gpuops status` whose GPU table Slack refuses in the thread (a passing internal_error): the reading is still
    the thread's evidence (the summary's edit shows it), and the person is then told a reference to the bot's log."""
    first, summary_ts = await thread_with_summary(lab, "note the first launch ran at 0.85")
    lab.standin.fail["chat.postMessage"] = "internal_error"
    await lab.mention("status", first.thread_ts)
    calls = await wait_text(lab, "GPUs clean", method="chat.update")
    assert "GPUs clean: pve5: GPU 0 1/49140 MiB, GPU 1 1/49140 MiB, no compute process" in summary_text(
        calls, summary_ts)
    incident = await lab.services.incidents.get(CHANNEL, first.thread_ts)
    assert incident.observations[-1].kind == "status" and "GPUs clean" in incident.observations[-1].text
    calls = await lab.standin.wait_for(lambda cs: any("reference `" in str(c.params.get("text")) for c in cs), 30)
    refused = [c for c in calls if c.method == "chat.postMessage" and not c.delivered]
    assert "GPU status" in str(refused[-2].params.get("text")) and "reference `" in refused[-1].params["text"]


async def test_a_thread_triage_whose_answer_slack_refuses_still_proposes_its_hypothesis_there(lab):
    """`@gpuops triage` whose answer Slack refuses: its first cause is still the thread's hypothesis and its reading
    of the GPUs the thread's evidence, both in the summary's edit."""
    first, summary_ts = await thread_with_summary(lab, "note the first launch ran at 0.85")
    lab.standin.fail["chat.postMessage"] = "internal_error"
    await lab.mention("triage", first.thread_ts)
    calls = await wait_text(lab, "the first cause is kv_pool_oom", method="chat.update")
    text = summary_text(calls, summary_ts)
    assert "*H1* the first cause is kv_pool_oom" in text and "triage's reading: GPUs clean" in text
    assert any(not c.delivered and f"*Triage of `{first.id}`*" in blocks_to_text(c.blocks)
               for c in lab.standin.of("chat.postMessage"))  # the answer was tried first


async def test_a_slash_triage_whose_answer_slack_refuses_everywhere_still_proposes_its_hypothesis_in_the_thread(lab):
    """`/sglang triage` whose answer neither the thread nor the command's response_url takes: the incident thread
    still takes its first cause as a hypothesis (the summary's edit shows it)."""
    failed, summary_ts = await thread_with_summary(lab, "note looking at this one")
    lab.standin.fail["chat.postMessage"] = "internal_error"
    lab.standin.fail["response_url"] = "expired_url"
    await lab.slash("/sglang", f"triage {failed.id}", user_id="U0EVE", answered=False)
    calls = await wait_text(lab, "the first cause is kv_pool_oom", method="chat.update")
    assert "*H1* the first cause is kv_pool_oom (proposed by triage of" in summary_text(calls, summary_ts)
    assert any(not c.delivered and f"*Triage of `{failed.id}`*" in blocks_to_text(c.blocks)
               for c in lab.standin.of("chat.postMessage"))  # the answer was tried first


async def thread_with_summary(lab, mention):
    """A failed launch's thread, ``mention`` said there: (the failed attempt, the ts of the summary it posted)."""
    first = await failed_launch(lab, "kv_pool_oom")
    await lab.mention(mention, first.thread_ts)
    calls = await wait_text(lab, "Incident summary", method="chat.postMessage")
    return first, next(c for c in calls if c.method == "chat.postMessage"
                       and "Incident summary" in blocks_to_text(c.blocks)).answer["ts"]


async def test_a_terminals_launch_and_stop_reach_the_thread_on_the_schedulers_next_tick(lab, tmp_path):
    """A terminal has no Slack: what it does to the thread's container is brought to the thread by the bot's
    scheduler, on its next tick, once; and after a Slack failure, on the tick after."""
    from bot.scheduler import Scheduler
    from tests.handlers.test_cli_launch import FITS, terminal
    from tests.handlers.test_launch_flow import model

    first, summary_ts = await thread_with_summary(lab, "hypothesis the KV pool is too small at 0.85")
    scheduler = Scheduler(lab.services, lab.app.client)
    await scheduler.tick()  # the Slack launch's own changes, already shown: nothing is sent again
    edits = len(lab.standin.of("chat.update"))

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    launched = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", model(lab), "--",
                              *FITS.split())
    assert launched.returncode == 0, launched.stdout + launched.stderr
    ready = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert ready.user.startswith("cli:") and ready.status.value == "ready"
    assert len(lab.standin.of("chat.update")) == edits  # the terminal told no one
    assert (await scheduler.tick()).containers == ["pve5:129"]
    text = summary_text(lab.standin.calls, summary_ts)
    assert f"`{ready.id}` ready" in text and f"`{first.id}` failed" in text
    edits = len(lab.standin.of("chat.update"))
    assert (await scheduler.tick()).containers == []  # nothing changed since
    assert len(lab.standin.of("chat.update")) == edits

    lab.standin.fail["chat.update"] = "fatal_error"
    stopped = await terminal(lab, tmp_path, "stop", ready.id, answer="y\n")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert (await scheduler.tick()).containers == ["pve5:129"]
    assert f"`{ready.id}` stopped" not in summary_text(lab.standin.calls, summary_ts)  # Slack refused the edit
    del lab.standin.fail["chat.update"]
    assert (await scheduler.tick()).containers == ["pve5:129"]  # given back, and sent this time
    assert f"`{ready.id}` stopped" in summary_text(lab.standin.calls, summary_ts)

    # the channel archived: that is not retried every tick
    lab.standin.fail["chat.update"] = "is_archived"
    again = await terminal(lab, tmp_path, "launch", "--container", "sglang-a6000", "--model", model(lab), "--",
                           *FITS.split())
    assert again.returncode == 0, again.stdout + again.stderr
    assert (await scheduler.tick()).containers == ["pve5:129"]
    assert (await scheduler.tick()).containers == []


async def test_a_deleted_summary_is_posted_again_in_the_thread(lab):
    first, summary_ts = await thread_with_summary(lab, "note first look")
    thread = first.thread_ts
    lab.standin.fail["chat.update"] = "message_not_found"  # someone deleted it
    await lab.mention("note second look", thread)
    calls = await wait_text(lab, "second look", method="chat.postMessage")
    again = [c for c in calls if c.method == "chat.postMessage" and "second look" in blocks_to_text(c.blocks)]
    assert len(again) == 1 and again[0].params["thread_ts"] == thread and again[0].answer["ts"] != summary_ts
    assert "first look" in blocks_to_text(again[0].blocks)  # the whole summary, not the change
    del lab.standin.fail["chat.update"]
    await lab.mention("note third look", thread)
    calls = await wait_text(lab, "third look", method="chat.update")
    assert "third look" in summary_text(calls, again[0].answer["ts"])


async def test_a_terminal_reads_the_threads_following_a_container(lab, tmp_path):
    import json

    from tests.handlers.test_cli_launch import terminal

    none = await terminal(lab, tmp_path, "incident", "sglang-a6000")
    assert none.returncode == 0 and "No incident thread follows pve5:129" in none.stdout, none.stdout + none.stderr
    first = await failed_launch(lab, "kv_pool_oom")
    await lab.mention("hypothesis leftover GPU memory from an earlier run", first.thread_ts)
    await wait_text(lab, "Incident summary", method="chat.postMessage")
    second = await failed_launch(lab, "kv_pool_oom")  # the thread's summary is not told yet (no tick ran)

    shown = await terminal(lab, tmp_path, "incident", "sglang-a6000")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"Thread {first.thread_ts} in channel C0LAB" in shown.stdout
    assert "*H1* leftover GPU memory from an earlier run" in shown.stdout
    assert f"`{first.id}` failed" in shown.stdout and f"`{second.id}` failed" in shown.stdout
    everywhere = await terminal(lab, tmp_path, "incident", "--json")
    (thread,) = json.loads(everywhere.stdout)
    assert thread["thread_ts"] == first.thread_ts and thread["container"] == "pve5:129 (sglang-a6000)"
    assert [h["text"] for h in thread["hypotheses"]] == ["leftover GPU memory from an earlier run"]
    assert second.id in thread["attempts"]  # observed, as the summary shows it
    node = await terminal(lab, tmp_path, "incident", "pve5")
    assert node.returncode == 2 and "incident threads follow a container" in node.stdout + node.stderr


async def test_a_terminals_hypothesis_decision_and_note_are_said_in_the_thread_on_the_schedulers_next_tick(
        lab, tmp_path):
    import json
    import re

    from bot.scheduler import Scheduler
    from tests.handlers.test_cli_launch import terminal

    first, summary_ts = await thread_with_summary(lab, "hypothesis leftover GPU memory from an earlier run")
    thread = first.thread_ts
    scheduler = Scheduler(lab.services, lab.app.client)
    await scheduler.tick()
    posts = len(lab.standin.of("chat.postMessage"))

    added = await terminal(lab, tmp_path, "incident", "sglang-a6000", "hypothesis", "the KV pool < the context")
    assert added.returncode == 0, added.stdout + added.stderr
    assert (f"Recorded in thread {thread} (channel C0LAB, pve5:129 (sglang-a6000)): H2: the KV pool < the context"
            in added.stdout)
    refuted = await terminal(lab, tmp_path, "incident", "pve5:129", "refute", "h1", "GPUs", "were", "clean")
    assert refuted.returncode == 0 and "H1 refuted: GPUs were clean" in refuted.stdout, refuted.stdout + refuted.stderr
    noted = await terminal(lab, tmp_path, "incident", "sglang-a6000", "note", "drained pve5", "--json")
    recorded = json.loads(noted.stdout)
    assert recorded["thread_ts"] == thread and recorded["recorded"]["kind"] == "note"
    who = recorded["recorded"]["author"]
    assert re.fullmatch(r"cli:\S+", who)
    assert len(lab.standin.of("chat.postMessage")) == posts  # a terminal has no Slack: nothing said yet

    assert (await scheduler.tick()).containers == ["pve5:129"]
    said = lab.standin.of("chat.postMessage")[posts:]
    assert [c.params["thread_ts"] for c in said] == [thread] * 3
    assert [c.params["text"] for c in said] == [
        f":keyboard: {who}, from a terminal: Recorded *H2*: the KV pool &lt; the context",
        f":keyboard: {who}, from a terminal: *H1* refuted: GPUs were clean",
        f":keyboard: {who}, from a terminal: Noted: drained pve5"]
    text = summary_text(lab.standin.calls, summary_ts)  # the one summary, edited in place
    assert f"*H2* the KV pool < the context ({who})" in text and f"refuted by {who}: GPUs were clean" in text
    assert f"{who}: drained pve5" in text
    await scheduler.tick()
    assert len(lab.standin.of("chat.postMessage")) == posts + 3  # each said once

    await lab.mention("confirm H2 0.88 started", thread)  # the thread goes on from the terminal's record
    calls = await wait_text(lab, "confirmed by", method="chat.update")
    assert "*H2* the KV pool < the context" in summary_text(calls, summary_ts)


async def test_a_terminals_word_names_its_thread_or_records_nothing(lab, tmp_path):
    from tests.handlers.test_cli_launch import terminal

    none = await terminal(lab, tmp_path, "incident", "sglang-a6000", "hypothesis", "leftovers")
    assert none.returncode == 2 and "No incident thread follows pve5:129 (sglang-a6000), so nothing was recorded" \
        in none.stderr, none.stdout + none.stderr
    first, _ = await thread_with_summary(lab, "note first")
    second, _ = await thread_with_summary(lab, "note second")
    both = await terminal(lab, tmp_path, "incident", "sglang-a6000", "hypothesis", "leftovers")
    assert both.returncode == 2 and "2 incident threads follow pve5:129 (sglang-a6000)" in both.stderr
    assert first.thread_ts in both.stderr and second.thread_ts in both.stderr and "--thread" in both.stderr
    for args, why in ((("hypothesis", "sglang-a6000", "leftovers"), "name the container first"),
                      (("sglang-a6000", "guess", "leftovers"), "`guess` is not a word for a thread"),
                      (("sglang-a6000", "confirm", "H7", "--thread", second.thread_ts),
                       "no hypothesis `H7` in this thread")):
        refused = await terminal(lab, tmp_path, "incident", *args)
        assert refused.returncode == 2 and why in refused.stderr, refused.stdout + refused.stderr
    chosen = await terminal(lab, tmp_path, "incident", "sglang-a6000", "hypothesis", "leftovers", "--thread",
                            second.thread_ts)
    assert chosen.returncode == 0 and f"Recorded in thread {second.thread_ts}" in chosen.stdout
    assert [h.text for h in (await lab.services.incidents.get("C0LAB", second.thread_ts)).hypotheses] == ["leftovers"]
    assert (await lab.services.incidents.get("C0LAB", first.thread_ts)).hypotheses == ()
    shown = await terminal(lab, tmp_path, "incident", "sglang-a6000", "--thread", first.thread_ts)
    assert f"Thread {first.thread_ts}" in shown.stdout and second.thread_ts not in shown.stdout


async def test_a_mention_whose_summary_slack_will_not_edit_keeps_its_word_and_says_where_the_error_is(lab, caplog):
    """Slack refusing the summary's edit for a reason the bot cannot pass over (invalid_blocks: a bug of its own):
    the word the person said is recorded all the same, and the thread is told a reference to the bot's log, not
    left silent and not shown the error's text."""
    first, summary_ts = await thread_with_summary(lab, "note first")
    lab.standin.fail["chat.update"] = "invalid_blocks"
    await lab.mention("note GPUs looked clean at 21:40", first.thread_ts)
    calls = await wait_text(lab, "reference `", method="chat.postMessage")
    (told,) = [c for c in calls if c.method == "chat.postMessage" and "reference `" in str(c.params.get("text"))]
    assert told.params["thread_ts"] == first.thread_ts and "invalid_blocks" not in told.params["text"]
    ref = told.params["text"].split("reference `")[1].split("`")[0]
    assert any(ref in r.getMessage() for r in caplog.records)
    incident = await lab.services.incidents.get(CHANNEL, first.thread_ts)
    assert incident.observations[-1].text.endswith(": GPUs looked clean at 21:40")
    del lab.standin.fail["chat.update"]
    await lab.mention("history", first.thread_ts)  # the next word there brings the summary up to date
    calls = await lab.standin.wait_for(lambda cs: any(
        c.method == "chat.update" and c.delivered and "21:40" in blocks_to_text(c.blocks) for c in cs), 30)
    assert "GPUs looked clean at 21:40" in summary_text(calls, summary_ts)


async def test_a_thread_of_many_long_hypotheses_keeps_its_summary_one_message_slack_takes(lab):
    """Slack refuses a message whose blocks hold too much text together (msg_blocks_too_long), so 28 hypotheses of the
    record's 500 characters would freeze the summary at the one before the limit. It stays edited, and names them all
    in their first words."""
    import json

    from tests.conftest import FIXTURES

    cases = [json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines() if x]
    evidence = " ".join(c["evidence"] for c in cases) * 2  # 8,929 characters, twice
    first, summary_ts = await thread_with_summary(lab, "note tried 0.85, then 0.88")
    for n in range(28):
        said = f"H{n + 1}: {evidence[n * 400:n * 400 + 490]}"
        assert await lab.mention_answered(f"hypothesis {said}", first.thread_ts) == 200
    refused = [c.answer.get("error") for c in lab.standin.of("chat.update") if not c.delivered]
    assert refused == []
    text = summary_text(lab.standin.calls, summary_ts)
    assert all(f"*H{n}* H{n}: " in text for n in range(1, 29))  # each, in its first words
    assert "tried 0.85, then 0.88" in text


async def test_a_person_a_thread_note_names_is_kept_in_its_record(lab):
    """Slack delivers a person named in a mention as `<@U0BOB>`: the note keeps them (only the bot's own mention is
    taken off), and the summary names them."""
    import aiohttp

    from bot.slack_standin import mention_event_body, signed_headers

    first, summary_ts = await thread_with_summary(lab, "note first")
    body = mention_event_body("note asked BOB to check NCCL_P2P_DISABLE", user_id="U0ALICE",
                              thread_ts=first.thread_ts).replace("BOB", "<@U0BOB>")  # as Slack sends a mention
    headers = {**signed_headers(lab.signing_secret, body), "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http, http.post(lab.app_url, data=body, headers=headers) as answer:
        assert answer.status == 200
    calls = await wait_text(lab, "NCCL_P2P_DISABLE", method="chat.update")
    assert "<@U0ALICE>: asked <@U0BOB> to check NCCL_P2P_DISABLE" in summary_text(calls, summary_ts)
    incident = await lab.services.incidents.get(CHANNEL, first.thread_ts)
    assert incident.observations[-1].text.endswith(": asked <@U0BOB> to check NCCL_P2P_DISABLE")


async def test_a_threads_history_has_every_word_reading_and_decision_in_order_in_slack_and_a_terminal(lab, tmp_path):
    """The summary shows the latest five notes and readings; `@gpuops history` (and `gpuops incident <container>
    history`) shows the whole record, in the order it happened, with who decided what and when."""
    from tests.handlers.test_cli_launch import terminal
    from tests.handlers.test_launch_flow import post_with

    first, summary_ts = await thread_with_summary(lab, "note step 0: tried 0.85")
    for n in range(1, 7):
        assert await lab.mention_answered(f"note step {n}: tried 0.8{n + 5}", first.thread_ts) == 200
    await lab.mention_answered("hypothesis leftover GPU memory from an earlier run", first.thread_ts)
    await lab.mention_answered("refute H1 the GPUs were clean before step 6", first.thread_ts)
    assert "… 2 earlier (`@gpuops history` lists them)" in summary_text(lab.standin.calls, summary_ts)
    assert "step 0: tried 0.85" not in summary_text(lab.standin.calls, summary_ts)

    await lab.mention("history", first.thread_ts)
    calls = await wait_text(lab, "History of this thread", method="chat.postMessage")
    answer = post_with(calls, "History of this thread")
    assert answer.params["thread_ts"] == first.thread_ts
    text = blocks_to_text(answer.blocks)
    said = [text.index(f"note <@U0ALICE>: step {n}: tried 0.8{n + 5}") for n in range(7)]
    raised = text.index("*H1* raised by <@U0ALICE>: leftover GPU memory from an earlier run")
    decided = text.index("*H1* refuted by <@U0ALICE>: the GPUs were clean before step 6")
    assert said == sorted(said) and said[-1] < raised < decided
    assert "Attempts on pve5:129" in text and first.id in text
    assert f"attempt `{first.id}` failed" in text and text.index(f"attempt `{first.id}` failed") < said[0]

    shown = await terminal(lab, tmp_path, "incident", "sglang-a6000", "history")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert all(f"step {n}: tried 0.8{n + 5}" in shown.stdout for n in range(7))
    assert "*H1* refuted by <@U0ALICE>: the GPUs were clean before step 6" in shown.stdout
    wrong = await terminal(lab, tmp_path, "incident", "sglang-a6000", "history", "now")
    assert wrong.returncode == 2 and "takes nothing after it" in wrong.stdout + wrong.stderr


async def test_a_launchs_thread_follows_its_container_however_many_attempts_came_after_it(lab):
    """A thread someone comes back to after a busy week: a hundred launches elsewhere since do not cut it off from
    its container (its first word there links it)."""
    from dataclasses import replace

    from tests.handlers.test_launch_flow import post_with

    first = await failed_launch(lab, "kv_pool_oom")
    for n in range(101):  # another container's launches, all after it
        await lab.services.attempts.save(replace(first, id=f"a20991231-{n:06d}-beef", vmid=131, thread_ts=None,
                                                 message_ts=None, created_at=first.created_at + n + 1))
    assert await lab.mention_answered("history", first.thread_ts) == 200
    calls = await wait_text(lab, "History of this thread", method="chat.postMessage")
    text = blocks_to_text(post_with(calls, "History of this thread").blocks)
    assert "History of this thread* — pve5:129" in text and first.id in text
    incident = await lab.services.incidents.get(CHANNEL, first.thread_ts)
    assert (incident.node, incident.vmid) == ("pve5", 129)
