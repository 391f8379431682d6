from bot.core.attempts import changes_between
from bot.core.incident import Incident, Observation, parse_mention


def test_a_mention_is_read_as_typed_from_slacks_markup():
    mention = parse_mention("<@U0GPUOPS> hypothesis the pool &lt; the context &amp; MTP's state, see <#C1|gpu-ops>")
    assert (mention.verb, mention.rest) == ("hypothesis", "the pool < the context & MTP's state, see #gpu-ops")


def test_parse_mentions():
    assert parse_mention("<@U0GPUOPS> hypothesis leftover memory from run 1").rest == "leftover memory from run 1"
    m = parse_mention("<@U0GPUOPS> refute H1 the GPUs were clean")
    assert (m.verb, m.target, m.rest) == ("refute", "H1", "the GPUs were clean")
    assert parse_mention("<@U0GPUOPS> what is going on?").verb == "help"


def test_residual_memory_is_refuted_by_clean_gpus_and_a_repeated_failure():
    incident = Incident("C", "1.0")
    incident = incident.observe(Observation(10, "attempt", "a1 failed", attempt="a1", outcome="failed",
                                            label="kv_pool_oom"))
    incident, h1 = incident.add_hypothesis("leftover GPU memory from an earlier run", "U1", 20)
    incident, h2 = incident.add_hypothesis("the context length is too big", "U2", 21)
    incident = incident.observe(Observation(30, "status", "GPUs clean: 2 GPUs", clean_gpus=True))
    assert incident.hypotheses[0].status == "open"  # clean GPUs alone do not decide it
    incident = incident.observe(Observation(40, "attempt", "a2 failed", attempt="a2", outcome="failed",
                                            label="kv_pool_oom"))
    assert incident.hypotheses[0].status == "refuted" and incident.hypotheses[0].tested_by == ("a2",)
    assert "repeated in a2" in incident.hypotheses[0].why
    assert incident.hypotheses[1].status == "open"  # not about memory: left to people
    assert incident.hypotheses[0].decided_at == 40  # when the attempt that decided it ended
    assert Incident.from_dict(incident.to_dict()) == incident


def test_the_threads_timeline_has_each_word_reading_and_decision_where_it_happened():
    from bot.core.incident import record_word, timeline

    incident = Incident("C", "1.0")
    incident = incident.observe(Observation(10, "attempt", "a1 failed", attempt="a1", outcome="failed",
                                            label="kv_pool_oom"))
    incident, _ = record_word(incident, "hypothesis", "leftover GPU memory", "", "U1", 20)
    incident, _ = record_word(incident, "hypothesis", "the context is too long", "", "U2", 25)
    incident, _ = record_word(incident, "note", "drained the node", "", "U1", 28)
    incident = incident.observe(Observation(30, "status", "GPUs clean: 2 GPUs", clean_gpus=True))
    incident, _ = record_word(incident, "refute", "64K fits the pool", "H2", "U1", 35)
    incident = incident.observe(Observation(40, "attempt", "a2 failed", attempt="a2", outcome="failed",
                                            label="kv_pool_oom"))
    assert [(e.at, e.kind, (e.hypothesis or e.observation).__class__.__name__) for e in timeline(incident)] == [
        (10, "attempt", "Observation"), (20, "raised", "Hypothesis"), (25, "raised", "Hypothesis"),
        (28, "note", "Observation"), (30, "status", "Observation"), (35, "decided", "Hypothesis"),
        (40, "attempt", "Observation"), (40, "decided", "Hypothesis")]
    assert [e.hypothesis.id for e in timeline(incident) if e.kind == "decided"] == ["H2", "H1"]
    # a record kept before decisions had their time: the decision has no event of its own
    kept = incident.to_dict()
    for h in kept["hypotheses"]:
        del h["decided_at"]
    assert [e.kind for e in timeline(Incident.from_dict(kept))].count("decided") == 0
    # reopened: no longer decided, so no decision event
    assert [e.kind for e in timeline(incident.decide("H2", "open", "U1", ""))].count("decided") == 1
    # with the container's attempt records at hand, each step of theirs is an event (its observed end is not repeated);
    # an attempt observed in the thread whose record is not among them keeps its observed end
    from bot.core.attempts import Attempt, AttemptStatus

    a2 = Attempt("a2", "U1", "C", "pve5", 129, "ct", "/m", (), 30000, 36.0).moved(AttemptStatus.PLANNED, 36).moved(
        AttemptStatus.LAUNCHING, 37).moved(AttemptStatus.FAILED, 40, "KV pool too small")
    steps = [(e.at, e.kind, e.transition.status.value if e.transition else e.observation.attempt if e.observation
              else e.hypothesis.id) for e in timeline(incident, [a2])]
    assert steps == [(10, "attempt", "a1"), (20, "raised", "H1"), (25, "raised", "H2"), (28, "note", None),
                     (30, "status", None), (35, "decided", "H2"), (37, "attempt", "launching"),
                     (40, "attempt", "failed"), (40, "decided", "H1")]


def test_a_different_failure_after_clean_gpus_does_not_refute():
    incident = Incident("C", "1.0")
    incident = incident.observe(Observation(10, "attempt", "a1", attempt="a1", outcome="failed", label="kv_pool_oom"))
    incident, _ = incident.add_hypothesis("residual memory", "U1", 20)
    incident = incident.observe(Observation(30, "status", "clean", clean_gpus=True))
    incident = incident.observe(Observation(40, "attempt", "a2", attempt="a2", outcome="failed", label="nccl_error"))
    assert incident.hypotheses[0].status == "open"


def test_a_triage_hypothesis_is_decided_by_the_attempt_that_made_its_experiment():
    from bot.core.attempts import changes_between

    seed = ("--tp", "2", "--enable-torch-compile", "--disable-custom-all-reduce")
    without_compile = changes_between(seed, ("--tp", "2", "--disable-custom-all-reduce"))
    assert without_compile == ("- --enable-torch-compile (on)",)
    incident, h1 = Incident("C1", "1.0").add_hypothesis(
        "the first cause is torch_compile_error (proposed by triage of a20261203-101500-1a2b)", "gpuops", 10.0)
    incident, h2 = incident.add_hypothesis("the compiler chokes on the attention layer", "U0ALICE", 11.0)
    # a relaunch with something else changed decides nothing
    incident = incident.observe(Observation(20.0, "attempt", "a2 failed", attempt="a2", outcome="failed",
                                            label="kv_pool_oom", changes=("--mem-fraction-static 0.85 -> 0.9",)))
    assert incident.hypotheses[0].status == "open"
    incident = incident.observe(Observation(30.0, "attempt", "a3 ready", attempt="a3", outcome="ready",
                                            changes=without_compile))
    decided = incident.hypotheses[0]
    assert (decided.status, decided.decided_by, decided.tested_by) == ("confirmed", "gpuops", ("a3",))
    assert "`- --enable-torch-compile (on)` started" in decided.why
    assert incident.hypotheses[1].status == "open"  # a person's hypothesis is theirs to decide


def test_the_experiment_failing_the_same_way_refutes_and_another_failure_decides_nothing():
    from bot.core.attempts import changes_between

    graphs_off = changes_between(("--tp", "2"), ("--tp", "2", "--disable-cuda-graph"))
    incident = triage_proposed("cuda_graph_capture_error")
    other = incident.observe(attempt_result(20.0, "a2", "failed", graphs_off, "nccl_error"))
    assert other.hypotheses[0].status == "open"
    same = incident.observe(attempt_result(20.0, "a2", "failed", graphs_off, "cuda_graph_capture_error"))
    assert same.hypotheses[0].status == "refuted" and "failed the same way" in same.hypotheses[0].why
    # the record survives Redis: observations keep their changes
    assert Incident.from_dict(same.to_dict()) == same


def test_a_memory_finding_is_confirmed_by_a_budget_change_that_starts_and_not_refuted_by_one_too_small():
    from bot.core.attempts import changes_between

    seed = ("--tp", "2", "--mem-fraction-static", "0.85")
    more_fraction = changes_between(seed, ("--tp", "2", "--mem-fraction-static", "0.88"))
    bf16_state = changes_between(seed, (*seed, "--mamba-ssm-dtype", "bfloat16"))
    assert more_fraction == ("--mem-fraction-static 0.85 -> 0.88",) and bf16_state == ("+ --mamba-ssm-dtype bfloat16",)
    incident = triage_proposed("kv_pool_oom")
    # 0.88 is not enough (seed step 7 on 0.5.9): the budget was still short, which refutes nothing
    short = incident.observe(attempt_result(20.0, "a2", "failed", more_fraction, "kv_pool_oom"))
    assert short.hypotheses[0].status == "open"
    # an unrelated switch that starts decides nothing either
    other = short.observe(attempt_result(25.0, "a3", "ready", ("+ --disable-custom-all-reduce (on)",)))
    assert other.hypotheses[0].status == "open"
    fixed = other.observe(attempt_result(30.0, "a4", "ready", bf16_state))
    decided = fixed.hypotheses[0]
    assert (decided.status, decided.tested_by) == ("confirmed", ("a4",))
    assert decided.why.startswith("a4 with `+ --mamba-ssm-dtype bfloat16` (a budget change) started")


def triage_proposed(label):
    """An incident whose only hypothesis is the one a triage of attempt a1 proposed, at t=10."""
    return Incident("C1", "1.0").add_hypothesis(f"the first cause is {label} (proposed by triage of a1)",
                                                "gpuops", 10.0)[0]


def attempt_result(at, attempt, outcome, changes, label=None):
    return Observation(at, "attempt", f"{attempt} {outcome}", attempt=attempt, outcome=outcome, label=label,
                       changes=tuple(changes))


def test_a_triage_proposes_its_first_cause_once_and_never_an_unknown():
    incident = Incident("C1", "1.0").propose_triage("kv_pool_oom", "a1", 10.0)
    assert [(h.id, h.author, h.text) for h in incident.hypotheses] == [
        ("H1", "gpuops", "the first cause is kv_pool_oom (proposed by triage of a1)")]
    assert incident.propose_triage("kv_pool_oom", "a2", 20.0) == incident  # the same finding again: no new one
    assert incident.propose_triage("unknown", "a2", 20.0) == incident  # nothing named: nothing to test
    assert incident.propose_triage("no_failure", "a2", 20.0) == incident  # a healthy log names no cause either
    # a person's hypothesis naming the label is not the triage's: the triage still proposes its own
    people, _ = Incident("C1", "2.0").add_hypothesis("the first cause is kv_pool_oom (I think)", "U0ALICE", 5.0)
    assert [h.id for h in people.propose_triage("kv_pool_oom", "a1", 10.0).hypotheses] == ["H1", "H2"]
    # another label is another hypothesis
    assert incident.propose_triage("nccl_error", "a3", 30.0).hypotheses[1].text.startswith(
        "the first cause is nccl_error (")


def test_leftover_memory_is_confirmed_when_freeing_it_lets_the_same_launch_start():
    incident = Incident("C", "1.0")
    incident = incident.observe(Observation(10, "attempt", "a1", attempt="a1", outcome="failed",
                                            label="gpu_memory_occupied"))
    incident, _ = incident.add_hypothesis(
        "the first cause is gpu_memory_occupied (proposed by triage of a1)", "gpuops", 11)
    incident = incident.observe(Observation(20, "status", "GPUs not clean: GPU 0 30000 MiB", clean_gpus=False))
    incident = incident.observe(Observation(30, "status", "GPUs clean: 2 GPUs", clean_gpus=True))
    assert incident.hypotheses[0].status == "open"
    # a relaunch that changed a flag proves nothing about the memory
    changed = incident.observe(Observation(40, "attempt", "a2", attempt="a2", outcome="ready",
                                           changes=("--mem-fraction-static 0.85 -> 0.8",)))
    assert changed.hypotheses[0].status == "open"
    # the relaunch's changes as the launch records them: "same flags as the previous attempt"
    argv = ("--tp", "2", "--mem-fraction-static", "0.85")
    same = incident.observe(Observation(40, "attempt", "a2", attempt="a2", outcome="ready",
                                        changes=changes_between(argv, argv)))
    decided = same.hypotheses[0]
    assert (decided.status, decided.tested_by) == ("confirmed", ("a2",)) and "same flags" in decided.why
    assert incident.observe(Observation(40, "attempt", "a2", attempt="a2", outcome="ready")).hypotheses[0] == decided
    # GPUs that were never seen holding memory: a start after a clean snapshot is not evidence of leftovers
    never_held = Incident("C", "1.0").observe(Observation(10, "attempt", "a1", attempt="a1", outcome="failed"))
    never_held, _ = never_held.add_hypothesis("leftover memory", "U1", 11)
    never_held = never_held.observe(Observation(30, "status", "GPUs clean", clean_gpus=True))
    never_held = never_held.observe(Observation(40, "attempt", "a2", attempt="a2", outcome="ready"))
    assert never_held.hypotheses[0].status == "open"


def test_either_experiment_of_a_label_decides_its_triage_hypothesis():
    from bot.core.attempts import changes_between

    argv = ("--tp", "2", "--kv-cache-dtype", "fp8_e4m3")
    incident, _ = Incident("C1", "1.0").add_hypothesis(
        "the first cause is quant_unsupported_on_gpu (proposed by triage of a1)", "gpuops", 10.0)
    incident = incident.observe(Observation(20.0, "attempt", "a2 ready", attempt="a2", outcome="ready",
                                            changes=changes_between(argv, ("--tp", "2"))))
    assert incident.hypotheses[0].status == "confirmed" and "--kv-cache-dtype" in incident.hypotheses[0].why


def test_an_nccl_finding_is_decided_by_the_relaunch_that_turned_a_transport_off():
    argv = ("--tp", "2")
    p2p_off = changes_between(argv, ("NCCL_P2P_DISABLE=1", *argv))
    assert p2p_off == ("+ NCCL_P2P_DISABLE=1",)
    incident = triage_proposed("nccl_error")
    # the relaunch with NCCL's log on (an experiment for detail) decides nothing, whether it starts or fails
    debug = changes_between(argv, ("NCCL_DEBUG=INFO", *argv))
    assert incident.observe(attempt_result(20.0, "a2", "ready", debug)).hypotheses[0].status == "open"
    assert incident.observe(attempt_result(20.0, "a2", "failed", debug, "nccl_error")).hypotheses[0].status == "open"
    started = incident.observe(attempt_result(20.0, "a2", "ready", p2p_off)).hypotheses[0]
    assert started.status == "confirmed" and "`+ NCCL_P2P_DISABLE=1` started" in started.why
    # a variable moved to the experiment's value makes it too; moved away from it does not
    moved = changes_between(("NCCL_SHM_DISABLE=0", *argv), ("NCCL_SHM_DISABLE=1", *argv))
    assert moved == ("NCCL_SHM_DISABLE=0 -> 1",)
    same = incident.observe(attempt_result(20.0, "a2", "failed", moved, "nccl_error")).hypotheses[0]
    assert same.status == "refuted" and "NCCL_SHM_DISABLE=0 -> 1" in same.why
    back = changes_between(("NCCL_SHM_DISABLE=1", *argv), ("NCCL_SHM_DISABLE=0", *argv))
    assert incident.observe(attempt_result(20.0, "a2", "ready", back)).hypotheses[0].status == "open"


def test_a_launch_the_oom_killer_ended_is_confirmed_by_a_relaunch_with_the_containers_limit_raised():
    from bot.core.attempts import ct_memory_change

    raised = ct_memory_change(65536, 131072)
    assert raised == "CT memory 64.0 GiB -> 128.0 GiB"
    assert ct_memory_change(65536, 65536) is None and ct_memory_change(None, 65536) is None
    incident = Incident("C", "1.0").observe(Observation(10, "attempt", "a1", attempt="a1", outcome="failed",
                                                        label="host_oom_kill"))
    incident = incident.propose_triage("host_oom_kill", "a1", 11)
    # a raise that was not enough refutes nothing; a limit lowered is no test of it
    again = incident.observe(Observation(20, "attempt", "a2", attempt="a2", outcome="failed", label="host_oom_kill",
                                         changes=("same flags as the previous attempt", raised)))
    assert again.hypotheses[0].status == "open"
    lowered = incident.observe(Observation(20, "attempt", "a2", attempt="a2", outcome="ready",
                                           changes=(ct_memory_change(131072, 65536),)))
    assert lowered.hypotheses[0].status == "open"
    started = again.observe(Observation(30, "attempt", "a3", attempt="a3", outcome="ready",
                                        changes=(ct_memory_change(131072, 196608),)))
    decided = started.hypotheses[0]
    assert (decided.status, decided.tested_by) == ("confirmed", ("a3",))
    assert decided.why == ("a3 with `CT memory 128.0 GiB -> 192.0 GiB` (a raised limit) started: the container's "
                           "memory limit was the cause")


WATCH_S = 1800  # how long the bot reads on the log of a launch it gave up on (the default launch timeout)


def observed(incident, attempts, now=100.0):
    """The incident with the attempts observed as the bot observes them at ``now``."""
    from bot.core.incident import with_attempts

    return with_attempts(incident, attempts, now, WATCH_S)


def launched(attempt_id, created, finished, outcome, gpus_check, label=None, changes=()):
    """An attempt as the launch records it: its pre-flight's "GPUs clean" check among its checks."""
    from bot.core.attempts import GPUS_CLEAN_CHECK, Attempt, AttemptStatus, Check

    attempt = Attempt(attempt_id, "U1", "C", "pve5", 129, None, "/models/m", ("--tp", "2"), 30000, created,
                      changes=tuple(changes), checks=(Check("port free", "ok", "30000"),
                                                      Check(GPUS_CLEAN_CHECK, gpus_check, "read"),),
                      observed={"triage": label} if label else {})
    attempt = attempt.moved(AttemptStatus.PLANNED, created).moved(AttemptStatus.LAUNCHING, created)
    return attempt.moved(AttemptStatus(outcome), finished)


def test_a_relaunch_whose_pre_flight_found_the_gpus_clean_and_that_failed_the_same_way_refutes_leftovers():
    """No `@gpuops status` is needed between: the relaunch's own pre-flight read its GPUs clean."""
    first = launched("a1", 5, 10, "failed", "fail", label="kv_pool_oom")  # forced past held memory
    incident, _ = observed(Incident("C", "1.0"), [first]).add_hypothesis("leftover memory", "U1", 20)
    assert incident.observations[0].clean_gpus is False
    again = launched("a2", 30, 40, "failed", "ok", label="kv_pool_oom")
    decided = observed(incident, [first, again]).hypotheses[0]
    assert (decided.status, decided.tested_by) == ("refuted", ("a2",))
    assert decided.why == "a2's pre-flight found its GPUs clean and the failure repeated in a2"
    # a pre-flight that could not read the GPUs ("warn") is no reading: nothing decided
    unread = launched("a2", 30, 40, "failed", "warn", label="kv_pool_oom")
    assert observed(incident, [first, unread]).hypotheses[0].status == "open"
    # another failure on clean GPUs decides nothing either
    other = launched("a2", 30, 40, "failed", "ok", label="nccl_error")
    assert observed(incident, [first, other]).hypotheses[0].status == "open"


def test_a_triage_reading_of_held_memory_then_a_clean_unchanged_relaunch_that_starts_confirms_leftovers():
    """The seed story's loop: the triage's own snapshot saw the leftover, it was freed, and the same flags started
    on GPUs the relaunch's pre-flight found clean."""
    from bot.core.attempts import SAME_FLAGS
    from bot.core.incident import gpu_reading
    from bot.core.inventory import Target
    from bot.core.status import assess_node
    from tests.core.test_argv_and_status import gpu, node_snapshot

    first = launched("a1", 5, 10, "failed", "fail", label="gpu_memory_occupied")
    incident = observed(Incident("C", "1.0", node="pve5", vmid=129), [first])
    held = assess_node(Target("node", "pve5"), node_snapshot([gpu(0, used=30000), gpu(1)]))
    reading = gpu_reading(12, [held], "triage")
    assert (reading.kind, reading.clean_gpus) == ("status", False)
    assert reading.text == ("triage's reading: GPUs not clean: pve5: GPU 0 30000/49140 MiB, GPU 1 1/49140 MiB, "
                            "no compute process")
    incident = incident.observe(reading).propose_triage("gpu_memory_occupied", "a1", 12)
    relaunch = launched("a2", 30, 40, "ready", "ok", changes=(SAME_FLAGS,))
    decided = observed(incident, [first, relaunch]).hypotheses[0]
    assert (decided.status, decided.tested_by) == ("confirmed", ("a2",))
    assert decided.why == ("memory held on the GPUs was freed (a2's pre-flight found them clean) and a2 started "
                           "with the same flags")
    # without a reading of held memory before, the same start says nothing about leftovers
    unseen = observed(Incident("C", "1.0"), [launched("a1", 5, 10, "failed", "ok", label="kv_pool_oom")])
    unseen, _ = unseen.add_hypothesis("leftover memory", "U1", 11)
    assert observed(unseen, [launched("a1", 5, 10, "failed", "ok", label="kv_pool_oom"),
                             relaunch]).hypotheses[0].status == "open"
    clean = gpu_reading(50, [assess_node(Target("node", "pve5"), node_snapshot([gpu(0), gpu(1)]))])
    assert (clean.clean_gpus, clean.text) == (True, "GPUs clean: pve5: GPU 0 1/49140 MiB, GPU 1 1/49140 MiB, "
                                                    "no compute process")


def test_a_launch_given_up_on_decides_nothing_while_it_may_yet_come_up():
    """A relaunch on clean GPUs given up on as hung (its server left running, its log read on) is no repeat of the
    failure: it decides on leftovers only once it has ended, come up, or been watched to the end."""
    from dataclasses import replace

    from bot.core.attempts import GAVE_UP_RUNNING

    first = launched("a1", 5, 10, "failed", "fail", label="kv_pool_oom")
    incident, _ = observed(Incident("C", "1.0"), [first]).add_hypothesis("leftover memory", "U1", 20)
    hung = replace(launched("a2", 30, 40, "failed", "ok"), error_line="no output for 10 min after loading weights",
                   observed={"stage": "loading weights", GAVE_UP_RUNNING: True})
    assert hung.may_yet_come_up(40 + WATCH_S, WATCH_S) and not hung.may_yet_come_up(41 + WATCH_S, WATCH_S)
    watched = observed(incident, [first, hung], now=100.0)
    assert (watched.hypotheses[0].status, watched.attempts) == ("open", ("a1",))
    # it came up after all: observed as the start it was (held memory seen, then an unchanged launch on GPUs its
    # pre-flight found clean started), not as the failure it was first recorded as
    up = observed(watched, [first, hung.came_up(160.0, "came up 2 min after gpuops gave up on it")], now=200.0)
    assert (up.hypotheses[0].status, up.hypotheses[0].tested_by, up.attempts) == ("confirmed", ("a2",), ("a1", "a2"))
    assert up.observations[-1].outcome == "ready"
    # watched to the end without coming up: a failure on clean GPUs, as any other
    ended = observed(watched, [first, hung], now=41 + WATCH_S).hypotheses[0]
    assert (ended.status, ended.tested_by) == ("refuted", ("a2",))
    assert not hung.with_server_ended({"by": "U1", "signal": "SIGTERM", "memory": "freed"}).may_yet_come_up(41, WATCH_S)


def test_a_word_is_recorded_as_a_mention_or_a_terminal_says_it():
    import pytest

    from bot.core.incident import Recorded, person, record_word
    from bot.errors import UsageError

    incident = Incident("C", "1.0", "pve5", 129)
    incident, said = record_word(incident, "hypothesis", "  the KV pool is too small  ", "", "U0ALICE", 10)
    assert said == Recorded("hypothesis", "the KV pool is too small", "H1", "U0ALICE") and not said.from_terminal
    incident, said = record_word(incident, "hypothesis", "leftover memory", "", "cli:root", 11)
    assert said.hypothesis_id == "H2" and said.from_terminal
    assert [(h.id, h.author) for h in incident.hypotheses] == [("H1", "U0ALICE"), ("H2", "cli:root")]
    incident, said = record_word(incident, "refute", "GPUs were clean", "h2", "cli:root", 12)
    assert said == Recorded("refuted", "GPUs were clean", "H2", "cli:root")
    assert said.plain == "H2 refuted: GPUs were clean"
    assert (incident.hypotheses[1].status, incident.hypotheses[1].decided_by) == ("refuted", "cli:root")
    incident, said = record_word(incident, "confirm", "", "H1", "U0BOB", 13)
    assert incident.hypotheses[0].decided_by == "<@U0BOB>" and said.text == "(no reason given)"
    incident, said = record_word(incident, "note", "tried 0.88", "", "U0BOB", 14)
    assert incident.observations[-1].text == "<@U0BOB>: tried 0.88"
    assert said.kind == "note" and said.plain == "note: tried 0.88"
    assert person("cli:root") == "cli:root" and person("gpuops") == "gpuops" and person("W0ENT") == "<@W0ENT>"

    # what is recorded is what was said: a word longer than the record keeps is refused whole, never cut short
    longest = "x" * 500
    incident, said = record_word(incident, "note", longest, "", "U0BOB", 15)
    assert said.text == longest and incident.observations[-1].text == f"<@U0BOB>: {longest}"
    for verb, hid, what in (("hypothesis", "", "a hypothesis"), ("note", "", "a note"), ("refute", "H1", "a reason")):
        with pytest.raises(UsageError, match=f"keeps {what} of up to 500 characters, and this one has 3,500: nothing "
                                             "was recorded"):
            record_word(incident, verb, "x" * 3500, hid, "U0BOB", 16)
    for verb, text, hid, what in (("hypothesis", " ", "", "say what the hypothesis is"),
                                  ("note", "", "", "say what to note"),
                                  ("confirm", "why", "", "name the hypothesis"),
                                  ("refute", "why", "H9", "no hypothesis `H9` in this thread"),
                                  ("status", "", "", "records nothing")):
        with pytest.raises(UsageError, match=what):
            record_word(incident, verb, text, hid, "cli:root", 20)


def test_a_hypothesis_is_decided_by_any_way_a_person_names_it_and_a_wrong_name_lists_the_threads():
    """`confirm 1`, `refute h2`, `confirm #1`, `refute H2:` name H1 and H2; before, only `H1`/`h1` did and `confirm 1`
    answered that the thread had no hypothesis `1`."""
    import pytest

    from bot.core.incident import hypothesis_ref, record_word
    from bot.errors import UsageError

    assert [hypothesis_ref(w) for w in ("1", "h2", "#3", "H4:", "(h5)", " H6, ", "", "leftovers")] == [
        "H1", "H2", "H3", "H4", "H5", "H6", "", "LEFTOVERS"]
    incident = Incident("C", "1.0", "pve5", 129)
    incident, _ = record_word(incident, "hypothesis", "leftover memory", "", "U0BOB", 1)
    incident, _ = record_word(incident, "hypothesis", "the KV pool is too small", "", "U0BOB", 2)
    incident, said = record_word(incident, "confirm", "clean GPUs, same OOM", "1", "U0BOB", 3)
    assert said.hypothesis_id == "H1" and incident.hypotheses[0].status == "confirmed"
    incident, said = record_word(incident, "refute", "0.88 fits", "h2:", "U0BOB", 4)
    assert said.hypothesis_id == "H2" and incident.hypotheses[1].status == "refuted"
    with pytest.raises(UsageError, match=r"no hypothesis `H7` in this thread \(it has H1, H2\)"):
        record_word(incident, "refute", "why", "7", "U0BOB", 5)
    with pytest.raises(UsageError, match=r"no hypothesis `H1` in this thread \(it has none yet\)"):
        record_word(Incident("C", "1.0", "pve5", 129), "confirm", "why", "#1", "U0BOB", 5)


def test_words_waiting_to_be_said_survive_the_record_and_an_older_record_reads_without_them():
    from bot.core.incident import Recorded, record_word

    incident, said = record_word(Incident("C", "1.0", "pve5", 129), "note", "drained the node", "", "cli:root", 1)
    waiting = Incident.from_dict({**incident.to_dict(), "announcements": [said.__dict__]})
    assert waiting.announcements == (Recorded("note", "drained the node", "", "cli:root"),)
    older = incident.to_dict()
    del older["announcements"]
    assert Incident.from_dict(older) == incident


def test_a_mention_keeps_the_people_it_names_and_takes_off_only_the_bots_own():
    said = "<@U0GPUOPS> note asked <@U0BOB> to check NCCL_P2P_DISABLE with <@U0CAROL|carol>"
    assert parse_mention(said, "U0GPUOPS").rest == "asked <@U0BOB> to check NCCL_P2P_DISABLE with <@U0CAROL|carol>"
    assert parse_mention(said).rest == "asked <@U0BOB> to check NCCL_P2P_DISABLE with <@U0CAROL|carol>"  # id unknown
    # the bot named later in the text (a reply quoting it) is still not part of the word
    assert parse_mention("<@U0GPUOPS> hypothesis <@U0GPUOPS> saw leftovers", "U0GPUOPS").rest == "saw leftovers"
