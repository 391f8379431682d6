"""GET /healthz: what a load balancer or `docker compose` asks a replica of the bot, over real HTTP."""

import asyncio
import time

import aiohttp

from bot.app import build_services, serve_http
from bot.lab.nodes import free_port
from bot.scheduler import Scheduler


async def get(url):
    async with aiohttp.ClientSession() as http, http.get(url) as answer:
        return answer.status, await answer.text()


async def test_a_replica_is_healthy_while_it_reaches_redis_and_its_scheduler_ticks(lab):
    import json

    healthz = lab.app_url.replace("/slack/events", "/healthz")
    status, body = await get(healthz)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["ok"] is True and answer["redis"] == "ok" and "scheduler" not in answer  # this one runs none

    scheduler = asyncio.ensure_future(Scheduler(lab.services, lab.app.client).run(every_s=1))
    try:
        for _ in range(600):
            if lab.services.ticked_at is not None:
                break
            await asyncio.sleep(0.1)
        assert lab.services.ticked_at is not None  # a tick ended well (before one does, "ok" is the start's grace)
        status, body = await get(healthz)
        assert status == 200 and json.loads(body)["scheduler"] == "ok", body
    finally:
        scheduler.cancel()
        await asyncio.gather(scheduler, return_exceptions=True)
    lab.services.ticked_at = time.monotonic() - 700  # no tick ended well for longer than 600 s: a stuck scheduler
    status, body = await get(healthz)
    answer = json.loads(body)
    assert status == 503 and answer["ok"] is False and answer["redis"] == "ok"
    assert answer["scheduler"].startswith("no tick ended well for 70") and answer["scheduler"].endswith("(> 600 s)")


async def test_a_replica_that_cannot_reach_redis_answers_503_without_its_url(lab):
    import json

    closed = free_port()  # nothing listens there
    settings = lab.services.settings.model_copy(update={"redis_url": f"redis://:s3cret-pw@127.0.0.1:{closed}/0"})
    services = build_services(settings, lab.services.inventory)
    port = free_port()
    runner = await serve_http(None, "127.0.0.1", port, services)  # Socket Mode: health only
    try:
        status, body = await get(f"http://127.0.0.1:{port}/healthz")
        assert status == 503 and json.loads(body)["redis"].startswith("unreachable ("), body
        assert "s3cret" not in body and str(closed) not in body
        status, _ = await get(f"http://127.0.0.1:{port}/slack/events")
        assert status == 404  # Socket Mode takes Slack's events: no HTTP route for them
    finally:
        await runner.cleanup()
        await services.close()
