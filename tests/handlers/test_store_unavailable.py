"""Redis down while the bot runs: the person who asked is told so, in Slack, instead of hearing nothing."""

from bot.lab.nodes import free_port
from bot.store import Store, connect
from tests.handlers.test_launch_flow import wait_text


async def test_a_command_that_reads_redis_while_it_is_down_answers_with_the_reason(lab):
    reachable = lab.services.store
    lab.services.store = Store(connect(f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"))  # nothing listens
    try:
        status, ack, _ = await lab.slash("/sglang", "history sglang-a6000")
        assert status == 200 and ack.startswith("reading the history")
        calls = await wait_text(lab, "Redis unavailable (ConnectionError)", method="response_url", timeout=30)
        answer = next(c for c in calls if c.method == "response_url" and "Redis unavailable" in str(c.params))
        assert "s3cret-pass" not in str(answer.params)
    finally:
        await lab.services.store.close()
        lab.services.store = reachable


async def test_a_status_with_redis_down_shows_the_gpus_and_says_their_processes_are_not_matched_to_launches(lab):
    """/gpu status reads the nodes, then Redis for the launch each GPU process belongs to: with Redis down there, the
    GPUs are still shown, and the answer says why no process is named as a launch's."""
    lab.nodes["pve5"].add_process(424242, 0, "python3", 20000, 129)  # something in CT 129 holds memory
    reachable = lab.services.store
    lab.services.store = Store(connect(f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"))
    try:
        status, ack, _ = await lab.slash("/gpu", "status pve5")
        assert status == 200 and ack == "checking 1 target…"
        calls = await wait_text(lab, "GPU status: 1 target", method="chat.postMessage", timeout=30)
        posted = next(c for c in calls if c.method == "chat.postMessage" and "GPU status" in c.params["text"])
        assert posted.params["text"].startswith("GPU status: 1 target (1 ok)")
        assert "; processes not matched to recorded launches: Redis unavailable (ConnectionError)" in \
            posted.params["text"]
        assert "s3cret-pass" not in str(posted.params)
    finally:
        await lab.services.store.close()
        lab.services.store = reachable


async def test_a_failure_of_the_bots_own_names_a_reference_in_its_log_and_says_nothing_of_its_insides(lab, caplog):
    """Slack refusing the answer itself (invalid_blocks: a bug of the bot's) leaves the person a reference to the
    bot's log, where the whole error is; the error's own text is not posted."""
    lab.standin.fail["chat.postMessage"] = "invalid_blocks"
    status, _, _ = await lab.slash("/gpu", "status pve5")
    assert status == 200
    calls = await wait_text(lab, "reference `", method="response_url", timeout=30)
    (answer,) = [c for c in calls if c.method == "response_url"]
    text = answer.params["text"]
    assert answer.params["response_type"] == "ephemeral" and "invalid_blocks" not in text
    ref = text.split("reference `")[1].split("`")[0]
    logged = [r for r in caplog.records if ref in r.getMessage()]
    assert logged and "invalid_blocks" in str(logged[0].exc_info[1])
