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
