"""Service fixtures: real Redis, real SSH servers acting as Proxmox nodes, the Slack
stand-in and the real Bolt app over loopback HTTP. Nothing listens on a fixed port."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.lab.console import Lab
from bot.lab.nodes import LabNode, sshd_path, start_node
from bot.store import EmbeddedRedis, Store, connect, redis_server_binary

SSH_KIND = os.environ.get("GPUOPS_TEST_SSH", "openssh" if sshd_path() else "asyncssh")


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"gpuops: lab SSH nodes use {SSH_KIND}" + ("" if SSH_KIND == "openssh" else
             " (no OpenSSH sshd found: falling back to asyncssh's server; MaxSessions is not exercised)")]
    try:
        lines.append(f"gpuops: redis-server {redis_server_binary()}" if not os.environ.get("REDIS_URL")
                     else f"gpuops: external Redis {os.environ['REDIS_URL']}")
    except Exception as exc:  # reported, then the Redis tests fail with the reason
        lines.append(f"gpuops: no Redis available: {exc}")
    return lines


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway real Redis for the session (or $REDIS_URL when given)."""
    external = os.environ.get("REDIS_URL")
    if external:
        yield external
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), persist=False).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    client = connect(redis_url)
    await client.flushall()
    yield Store(client)
    await client.aclose()


@pytest.fixture
async def pve_node(tmp_path: Path) -> AsyncIterator[LabNode]:
    node = await start_node(tmp_path / "pve5", "pve5", prefer=SSH_KIND)
    yield node
    await node.stop()


@pytest.fixture
async def lab(tmp_path: Path, redis_url: str) -> AsyncIterator[Lab]:
    """The whole bot: lab nodes pve5 (CT 129), pve6 (NVML mismatch), pve7 (down), the
    stand-in, and the real app over HTTP; the same wiring as the README's main command."""
    instance = Lab(tmp_path / "lab")
    await instance.start(redis_url=redis_url, prefer=SSH_KIND)
    client = connect(redis_url)
    await client.flushall()
    await client.aclose()
    yield instance
    await instance.stop()
