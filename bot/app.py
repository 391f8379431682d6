"""The composition root: the one place where the edges are wired together."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp

from bot.config import Settings, load_inventory
from bot.core.inventory import Inventory
from bot.core.status import Thresholds
from bot.errors import StoreError
from bot.launch_settings import LaunchSettings
from bot.slack import ChannelPace, web_client
from bot.ssh import SshTransport
from bot.store import AttemptStore, EmbeddedRedis, IncidentStore, Store, connect

log = logging.getLogger("gpuops")


@dataclass
class Services:
    """What the use cases need; built once, handed to every front end."""

    settings: Settings
    inventory: Inventory
    transport: SshTransport
    store: Store
    limits: Thresholds
    embedded_redis: EmbeddedRedis | None = None
    replica: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    group_cache: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)
    pace: ChannelPace = field(default_factory=ChannelPace)  # shared across replicas once built
    # the scheduler's heartbeat, for /healthz: how often it ticks (None: this process runs none), when it started and
    # when a tick last ended well (time.monotonic())
    tick_every_s: float | None = None
    scheduler_since: float = 0.0
    ticked_at: float | None = None

    @property
    def attempts(self) -> AttemptStore:
        return AttemptStore(self.store.redis)

    @property
    def incidents(self) -> IncidentStore:
        return IncidentStore(self.store.redis)

    @property
    def launch(self) -> LaunchSettings:
        return self.settings.launch_settings()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run background work (progress tracking) and keep a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def close(self) -> None:
        """Trackers stop between remote commands; whatever does not end in time is cancelled,
        and no wait is unbounded (a cancelled SSH command can take its time to unwind)."""
        self.stopping.set()
        if self.tasks:
            _, pending = await asyncio.wait(list(self.tasks), timeout=10)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await self.transport.close()
        await self.store.close()
        if self.embedded_redis is not None:
            await asyncio.to_thread(self.embedded_redis.stop)


def build_services(settings: Settings, inventory: Inventory | None = None, base_dir: Path | None = None) -> Services:
    inventory = inventory or load_inventory(settings.inventory)
    transport = SshTransport(
        inventory,
        base_dir=base_dir or settings.inventory.parent,
        connect_timeout_s=settings.ssh_connect_timeout_s,
        command_timeout_s=settings.ssh_command_timeout_s,
        keepalive_s=settings.ssh_keepalive_s,
        max_channels=settings.ssh_max_channels,
    )
    embedded = None
    url = settings.redis_url
    if not url:
        embedded = EmbeddedRedis(settings.data_dir / "redis").start()
        url = embedded.url
    store = Store(connect(url))
    return Services(settings, inventory, transport, store, settings.thresholds(), embedded,
                    pace=ChannelPace(shared=store.reserve_post_slot))


def build_app(services: Services) -> AsyncApp:
    settings = services.settings
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None
    if not token or not secret:
        from bot.errors import ConfigError

        raise ConfigError("GPUOPS_SLACK_BOT_TOKEN and GPUOPS_SLACK_SIGNING_SECRET are required to serve Slack")
    app = AsyncApp(
        signing_secret=secret,
        client=web_client(token, settings.slack_api_url),
        process_before_response=False,
    )

    from handlers import actions, gpu, sglang
    from handlers.common import say_failure

    @app.error
    async def on_error(error: Exception, body: dict[str, Any], logger: logging.Logger, respond: Any,
                       client: Any) -> None:
        ref = uuid.uuid4().hex[:8]
        logger.error("unhandled error ref=%s in %s", ref, body.get("command") or body.get("type"), exc_info=error)
        await say_failure(error, ref, body, respond, client)

    from handlers.mentions import register as register_mentions

    gpu.register(app, services)
    sglang.register(app, services)
    actions.register(app, services)
    register_mentions(app, services)
    return app


async def after_start(app: AsyncApp, services: Services, scheduler: bool = False) -> int:
    """Reconcile attempts a previous run left launching (follow the live ones again) and, in
    production, start the scheduler (sampling, daily posts, takeover of lapsed tracking)."""
    from handlers.sglang import resume_tracking

    try:
        added = await services.attempts.backfill_active()
        if added:
            log.info("running set: %d attempts saved before it existed added", added)
    except StoreError as exc:
        log.warning("%s", exc.user_message)
    resumed = await resume_tracking(services, app.client)
    if scheduler:
        from bot.scheduler import Scheduler

        services.spawn(Scheduler(services, app.client, sample_interval_s=services.settings.sample_interval_s).run())
    return resumed


HEALTH_REDIS_TIMEOUT_S = 2.0
SCHEDULER_STALE_MIN_S = 600.0  # a tick samples every node, posts, follows launches: minutes are not a hang


async def health(services: Services) -> dict[str, Any]:
    """What a load balancer or `docker compose` asks a replica: does it reach Redis, and (when it runs the
    scheduler) did a tick end well lately. Never raises; ``ok`` is the answer, the other keys say which part is not
    well."""
    answer: dict[str, Any] = {"replica": services.replica}
    healthy = True
    try:
        await asyncio.wait_for(services.store.redis.ping(), HEALTH_REDIS_TIMEOUT_S)
        answer["redis"] = "ok"
    except Exception as exc:  # the reason's kind only: a URL with its password never goes out
        answer["redis"] = f"unreachable ({type(exc).__name__})"
        healthy = False
    if services.tick_every_s is not None:
        age = time.monotonic() - (services.ticked_at if services.ticked_at is not None else services.scheduler_since)
        stale_s = max(SCHEDULER_STALE_MIN_S, 3 * services.tick_every_s)
        answer["scheduler"] = "ok" if age <= stale_s else f"no tick ended well for {age:.0f} s (> {stale_s:.0f} s)"
        answer["scheduler_tick_age_s"] = round(age, 1)
        healthy = healthy and age <= stale_s
    return {"ok": healthy, **answer}


def _health_route(web_app: web.Application, services: Services) -> None:
    async def healthz(_request: web.Request) -> web.Response:
        answer = await health(services)
        return web.json_response(answer, status=200 if answer["ok"] else 503)

    web_app.router.add_get("/healthz", healthz)


async def serve_http(app: AsyncApp | None, host: str, port: int, services: Services | None = None) -> web.AppRunner:
    """Slack's events at /slack/events (none for ``app=None``: Socket Mode takes them), and with ``services``
    GET /healthz (200, or 503 naming what is not well)."""
    web_app = app.web_app(path="/slack/events") if app is not None else web.Application()
    if services is not None:
        _health_route(web_app, services)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve(settings: Settings) -> None:
    """Run the bot until SIGTERM or SIGINT: Socket Mode when an app token is set, else HTTP on
    settings.http_host:port. Then it stops cleanly: the listener closes, background work ends between remote
    commands, and an embedded Redis writes its AOF and exits (killed outright, the process would leave that
    redis-server running on the data dir beside the one the next start spawns)."""
    services = build_services(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner: web.AppRunner | None = None
    handler: Any = None
    try:
        app = build_app(services)
        if settings.slack_app_token:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(app, settings.slack_app_token.get_secret_value())
            runner = await serve_http(None, settings.http_host, settings.http_port, services)  # /healthz only
            log.info("gpuops: Socket Mode, %d nodes; health on %s:%d/healthz", len(services.inventory.nodes),
                     settings.http_host, settings.http_port)
            await after_start(app, services, scheduler=True)
            await handler.connect_async()
        else:
            runner = await serve_http(app, settings.http_host, settings.http_port, services)
            await after_start(app, services, scheduler=True)
            log.info("gpuops: HTTP on %s:%d/slack/events (health: /healthz)", settings.http_host, settings.http_port)
        await stop.wait()
        log.info("gpuops: stopping")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if handler is not None:
            await handler.close_async()
        if runner is not None:
            await runner.cleanup()
        await services.close()
