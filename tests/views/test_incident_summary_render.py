"""The incident thread's summary stays one message Slack takes, however long the bring-up."""

import json

from bot.core.attempts import Attempt, AttemptStatus
from bot.core.incident import Incident
from bot.views import MESSAGE_TEXT_LIMIT, blocks_to_text, incident_summary
from tests.conftest import FIXTURES

CASES = [json.loads(x) for x in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines() if x]


def failed(n: int, error_line: str) -> Attempt:
    a = Attempt(f"a20261202-12{n:02d}00-abcd", "U1", "C", "pve5", 129, "sglang-a6000", "/models/q",
                ("--tp", "2", "--mem-fraction-static", f"0.{80 + n}"), 30000, 1000.0 + n,
                changes=(f"--mem-fraction-static 0.{79 + n} -> 0.{80 + n}",), error_line=error_line)
    return a.moved(AttemptStatus.PLANNED, 1000.0 + n).moved(AttemptStatus.LAUNCHING, 1000.0 + n).moved(
        AttemptStatus.FAILED, 1001.0 + n)


def test_a_launch_given_up_on_and_still_watched_says_when_it_counts_for_the_hypotheses():
    """Its server left running may yet come up, so it decides no hypothesis yet: the summary says until when."""
    from dataclasses import replace

    from bot.core.attempts import GAVE_UP_RUNNING, WATCHED_UNTIL

    hung = replace(failed(1, "no output for 10 min after loading weights began - a hang at loading weights"),
                   observed={"stage": "loading weights", GAVE_UP_RUNNING: True, WATCHED_UNTIL: 1002 + 1800})
    text = blocks_to_text(incident_summary(Incident("C", "1.0", "pve5", 129), [hung]).blocks)
    assert ("a hang at loading weights · given up on with its server left running: a result for the hypotheses once "
            "it comes up, ends, or 00:46 UTC passes") in text, text
    # once it came up, or its server ended, it is a result like any other
    up = hung.came_up(1100.0, "came up 98 s after gpuops gave up on it")
    ended = hung.with_server_ended({"by": "U1", "signal": "SIGTERM", "memory": "memory returned"})
    for settled in (up, ended):
        assert "given up on" not in blocks_to_text(incident_summary(Incident("C", "1.0", "pve5", 129),
                                                                    [settled]).blocks)


def test_a_long_incident_keeps_its_first_and_latest_attempts_and_every_hypothesis_within_slacks_limit():
    # 20 attempts (what the thread reads) failing with real error lines; 20 hypotheses worded as the corpus's
    # evidence notes, each decided with a long reason
    evidence = [c["evidence"] for c in CASES if len(c["evidence"]) > 100]
    assert len(evidence) >= 40
    attempts = [failed(n, evidence[n][:400]) for n in range(20)]
    incident = Incident("C", "1.0", "pve5", 129)
    for n in range(20):
        incident, h = incident.add_hypothesis(evidence[20 + n], "U0ALICE", 2000.0 + n)
        incident = incident.decide(h.id, "refuted", "gpuops", evidence[n] + " " + evidence[-1 - n])
    text = "\n".join(b["text"]["text"] for b in incident_summary(incident, attempts).blocks)
    assert len(text) <= MESSAGE_TEXT_LIMIT
    shown = blocks_to_text(incident_summary(incident, attempts).blocks)
    assert attempts[0].id in shown and attempts[-1].id in shown  # where it began, where it is
    left_out = [a.id for a in attempts if a.id not in shown]
    assert left_out and f"… {len(left_out)} attempts in between (`@gpuops history` lists them)" in shown
    assert all(f"*H{n}*" in shown for n in range(1, 21))
    # a short incident is shown whole
    short = blocks_to_text(incident_summary(incident, attempts[:3]).blocks)
    assert all(a.id in short for a in attempts[:3]) and "in between" not in short


def test_a_word_from_a_terminal_is_said_as_such_and_a_notes_author_is_a_mention():
    from bot.core.incident import Recorded, record_word
    from bot.views import recorded_text

    said = recorded_text(Recorded("hypothesis", "pool < context", "H1", "U0ALICE"))
    assert said == "Recorded *H1*: pool &lt; context"
    assert recorded_text(Recorded("refuted", "clean GPUs", "H2", "U0ALICE")) == "*H2* refuted: clean GPUs"
    assert recorded_text(Recorded("note", "drained <pve5>", "", "cli:root")) == (
        ":keyboard: cli:root, from a terminal: Noted: drained &lt;pve5&gt;")
    incident = Incident("C", "1.0", "pve5", 129)
    incident, _ = record_word(incident, "note", "tried <0.88>", "", "U0ALICE", 1)
    incident, _ = record_word(incident, "hypothesis", "leftovers", "", "cli:root", 2)
    incident, _ = record_word(incident, "refute", "clean", "H1", "U0BOB", 3)
    shown = "\n".join(b["text"]["text"] for b in incident_summary(incident, []).blocks)
    assert "• <@U0ALICE>: tried &lt;0.88&gt;" in shown  # the author a mention, what they typed escaped
    assert "*H1* leftovers (cli:root) — refuted by <@U0BOB>: clean" in shown


def test_a_thread_of_more_hypotheses_than_fit_drops_the_oldest_decided_ones_first_and_says_so():
    from bot.slack_standin import refused_for_size

    words = " ".join(c["evidence"] for c in CASES) * 3
    incident = Incident("C", "1.0", "pve5", 129)
    for n in range(80):  # at the record's 500 characters; every other one refuted with a 500-character reason
        incident, h = incident.add_hypothesis(words[n * 300:n * 300 + 500], "U0ALICE", 2000.0 + n)
        if n % 2:
            incident = incident.decide(h.id, "refuted", "U0BOB", words[n * 200:n * 200 + 500])
    attempts = [failed(n, CASES[n]["evidence"][:400]) for n in range(20)]
    summary = incident_summary(incident, attempts)
    assert refused_for_size(summary.blocks) is None  # one message Slack takes
    shown = blocks_to_text(summary.blocks)
    listed = [h.id for h in incident.hypotheses if f"*{h.id}* " in shown]
    open_ids = [h.id for h in incident.hypotheses if h.status == "open"]
    assert set(open_ids) <= set(listed)  # every one still open is named
    decided_shown = [i for i in listed if i not in open_ids]
    # the decided ones that give way are the oldest: those still shown are the latest
    assert decided_shown == [h.id for h in incident.hypotheses if h.status != "open"][-len(decided_shown):]
    assert f"… {80 - len(listed)} earlier hypotheses not shown here (`@gpuops history` lists every one)" in shown
    assert attempts[0].id in shown and attempts[-1].id in shown
    # in their first words, marked cut
    assert f"*H1* {words[:150]}" in shown and f"*H1* {words[:500]}" not in shown


def test_a_threads_history_holds_every_hypothesis_decision_and_note_whole_in_the_order_they_happened():
    """What the summary gives way on is all in `@gpuops history`: 80 hypotheses of 500 characters (every other one
    refuted with a 500-character reason), 12 notes and readings, and 20 attempts, in messages Slack takes."""
    from bot.core.incident import Observation, gpu_reading, with_attempts
    from bot.slack_standin import refused_for_size
    from bot.views import thread_history_messages

    words = " ".join(c["evidence"] for c in CASES) * 3
    incident = Incident("C", "1.0", "pve5", 129)
    for n in range(80):
        incident, h = incident.add_hypothesis(words[n * 300:n * 300 + 500], "U0ALICE", 2000.0 + 60 * n)
        if n % 2:
            incident = incident.decide(h.id, "refuted", "<@U0BOB>", words[n * 200:n * 200 + 500], at=2030.0 + 60 * n)
    for n in range(12):
        incident = incident.observe(Observation(2010.0 + 400 * n, "note", f"<@U0ALICE>: tried step {n} <0.8{n % 10}>"))
    incident = incident.observe(gpu_reading(9000.0, []))
    attempts = [failed(n, CASES[n]["evidence"][:400]) for n in range(20)]
    incident = with_attempts(incident, attempts, 10_000.0, 1800)
    messages = thread_history_messages(incident, attempts)
    assert len(messages) > 1 and all(refused_for_size(m.blocks) is None for m in messages)
    assert [m.text for m in messages][:2] == [f"History of the thread on pve5:129 (part {n}/{len(messages)})"
                                              for n in (1, 2)]
    text = "\n".join(b["text"]["text"] for m in messages for b in m.blocks if b.get("text"))  # as Slack gets it
    lines = text.splitlines()
    for h in incident.hypotheses:  # whole, however long: the text and, when decided, the reason
        raised = next(n for n, x in enumerate(lines) if f"*{h.id}* raised by <@U0ALICE>: " in x)
        assert _escaped(h.text) in lines[raised]
        if h.status == "refuted":
            decided = next(n for n, x in enumerate(lines) if x.endswith(f":x: *{h.id}* refuted by <@U0BOB>: "
                                                                       + _escaped(h.why)))
            assert decided > raised
    notes = [n for n, x in enumerate(lines) if ":memo: note <@U0ALICE>: tried step" in x]
    assert len(notes) == 12 and "tried step 3 &lt;0.83&gt;" in lines[notes[3]]
    stamps = [x.split("`")[1] for x in lines if x.startswith("`") and not x.startswith("```")]
    # oldest first, every event: each attempt's launch and its end
    assert len(stamps) == 80 + 40 + 12 + 1 + 2 * 20 and stamps == sorted(stamps)
    for a in attempts:
        launched = next(n for n, x in enumerate(lines) if x.endswith(
            f"` :hourglass_flowing_sand: attempt `{a.id}` launched by U1 — changed: {_escaped(a.changes_text)}"))
        assert lines[launched + 1].endswith(f"` :red_circle: attempt `{a.id}` failed: {_escaped(a.error_line)}")
    summary = blocks_to_text(incident_summary(incident, attempts).blocks)
    assert "… 8 earlier (`@gpuops history` lists them)" in summary  # 13 notes and readings; the latest 5 shown


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_a_summary_that_fits_shows_each_hypothesis_whole():
    incident = Incident("C", "1.0", "pve5", 129)
    text = CASES[0]["evidence"] + " " + CASES[1]["evidence"]
    incident, _ = incident.add_hypothesis(text[:500], "U0ALICE", 1.0)
    shown = blocks_to_text(incident_summary(incident, [failed(1, "x")]).blocks)
    assert f"*H1* {text[:500].strip()} (" in shown


def test_a_person_named_in_a_word_stays_a_mention_in_the_reply_and_the_summary():
    from bot.core.incident import Recorded, record_word
    from bot.views import recorded_text

    assert recorded_text(Recorded("note", "asked <@U0BOB> to check <NCCL>", "", "U0ALICE")) == (
        "Noted: asked <@U0BOB> to check &lt;NCCL&gt;")
    incident = Incident("C", "1.0", "pve5", 129)
    incident, _ = record_word(incident, "hypothesis", "<@U0BOB>'s P2P change & the NCCL hang", "", "U0ALICE", 1)
    incident, _ = record_word(incident, "refute", "<@U0BOB> reverted it, same hang", "H1", "U0ALICE", 2)
    shown = incident_summary(incident, []).blocks[0]["text"]["text"]
    assert ("*H1* <@U0BOB>'s P2P change &amp; the NCCL hang (<@U0ALICE>) — refuted by <@U0ALICE>: <@U0BOB> reverted "
            "it, same hang") in shown


def test_who_stopped_an_attempt_reads_as_a_mention_in_the_summary():
    a = Attempt("a20261202-120000-abcd", "U1", "C", "pve5", 129, "sglang-a6000", "/models/q", ("--tp", "2"), 30000,
                1000.0)
    a = a.moved(AttemptStatus.PLANNED, 1000.0).moved(AttemptStatus.LAUNCHING, 1001.0).moved(AttemptStatus.READY, 1002.0)
    stopped = a.moved(AttemptStatus.STOPPED, 1003.0, "stopped by <@U0ALICE> (SIGTERM); memory returned: GPU 0: 1 MiB")
    shown = incident_summary(Incident("C", "1.0", "pve5", 129), [stopped]).blocks[0]["text"]["text"]
    assert "stopped — changed:  — stopped by <@U0ALICE> (SIGTERM); memory returned: GPU 0: 1 MiB" in shown


def test_the_history_of_a_thread_with_nothing_in_it_says_how_to_begin():
    from bot.views import thread_history_messages

    (message,) = thread_history_messages(Incident("C", "1.0"), [])
    text = blocks_to_text(message.blocks)
    assert message.text == "History of this thread" and "History of this thread* — no container linked yet" in text
    assert "this thread follows no container yet (`@gpuops status <container>`" in text
    assert "nothing recorded yet — `@gpuops hypothesis <text>`" in text
    (linked,) = thread_history_messages(Incident("C", "1.0", "pve5", 129), [])
    assert "No attempts recorded yet on pve5:129" in blocks_to_text(linked.blocks)


def test_the_same_reading_taken_again_and_again_is_one_line_of_the_summary_with_its_count():
    """A status asked for five times in a row reads the GPUs the same each time: the summary shows it once, with how
    many times and when last, so a note before it is not pushed out of the five lines the summary keeps; the
    history keeps every one."""
    from bot.core.incident import Observation, gpu_reading
    from bot.core.inventory import Target
    from bot.core.status import assess_node
    from bot.views import thread_history_messages
    from tests.core.test_argv_and_status import gpu, node_snapshot

    clean = [assess_node(Target("node", "pve5"), node_snapshot([gpu(0), gpu(1)]))]
    incident = Incident("C", "1.0", "pve5", 129)
    incident = incident.observe(Observation(1000.0, "note", "<@U0ALICE>: pkill -9 -f python3 run by hand at 10:00"))
    for n in range(5):
        incident = incident.observe(gpu_reading(2000.0 + 60 * n, clean))
    incident = incident.observe(Observation(2400.0, "note", "<@U0BOB>: driver reloaded"))
    incident = incident.observe(gpu_reading(2500.0, clean))
    summary = blocks_to_text(incident_summary(incident, []).blocks)
    reading = incident.observations[1].text
    assert summary.count(reading) == 2, summary  # five in a row, then one after the note
    assert f"• {reading} (×5, the last at 00:37 UTC)" in summary
    assert "pkill -9 -f python3 run by hand" in summary and "earlier" not in summary
    history = "\n".join(blocks_to_text(m.blocks) for m in thread_history_messages(incident, []))
    assert history.count(reading) == 6
