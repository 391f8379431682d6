from bot.core.incident import Incident, Observation, parse_mention


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
    assert Incident.from_dict(incident.to_dict()) == incident


def test_a_different_failure_after_clean_gpus_does_not_refute():
    incident = Incident("C", "1.0")
    incident = incident.observe(Observation(10, "attempt", "a1", attempt="a1", outcome="failed", label="kv_pool_oom"))
    incident, _ = incident.add_hypothesis("residual memory", "U1", 20)
    incident = incident.observe(Observation(30, "status", "clean", clean_gpus=True))
    incident = incident.observe(Observation(40, "attempt", "a2", attempt="a2", outcome="failed", label="nccl_error"))
    assert incident.hypotheses[0].status == "open"
