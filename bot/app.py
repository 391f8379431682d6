"""The composition root: the one place where the edges are wired together."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp

from bot.config import Settings, load_inventory
from bot.core.inventory import Inventory
from bot.core.status import Thresholds
from bot.slack import web_client
from bot.ssh import SshTransport
from bot.store import EmbeddedRedis, Store, connect

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

    async def close(self) -> None:
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
    return Services(settings, inventory, transport, Store(connect(url)), settings.thresholds(), embedded)


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

    @app.error
    async def on_error(error: Exception, body: dict[str, Any], logger: logging.Logger) -> None:
        ref = uuid.uuid4().hex[:8]
        logger.exception("unhandled error ref=%s in %s", ref, body.get("command") or body.get("type"), exc_info=error)

    from handlers import gpu, sglang

    gpu.register(app, services)
    sglang.register(app, services)
    return app


async def serve_http(app: AsyncApp, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app.web_app(path="/slack/events"), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve(settings: Settings) -> None:
    """Run the bot: Socket Mode when an app token is set, else HTTP on settings.http_host:port."""
    services = build_services(settings)
    app = build_app(services)
    try:
        if settings.slack_app_token:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(app, settings.slack_app_token.get_secret_value())
            log.info("gpuops: Socket Mode, %d nodes", len(services.inventory.nodes))
            await handler.start_async()
        else:
            await serve_http(app, settings.http_host, settings.http_port)
            log.info("gpuops: HTTP on %s:%d/slack/events", settings.http_host, settings.http_port)
            await asyncio.Event().wait()
    finally:
        await services.close()
