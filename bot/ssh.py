"""The only place a remote process runs: asyncssh to Proxmox nodes.

One connection per node, reused, with fewer concurrent channels than OpenSSH's
``MaxSessions`` (10). Every command is bounded on the far side with ``timeout -k`` because
an asyncssh client timeout leaves the remote process (and its channel) alive. Host keys are
verified against the node's known_hosts file; an unknown or changed key is refused.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from bot.core.argv import Argv, to_command, with_timeout
from bot.core.inventory import Inventory, Node
from bot.core.status import TargetState, pct_refusal
from bot.errors import CommandFailed, ConnectError, ContainerDown, HostKeyError, RemoteTimeout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str


@dataclass
class _NodeLink:
    lock: asyncio.Lock
    channels: asyncio.Semaphore
    conn: asyncssh.SSHClientConnection | None = None


class SshTransport:
    def __init__(
        self,
        inventory: Inventory,
        *,
        base_dir: Path = Path("."),
        connect_timeout_s: float = 6.0,
        command_timeout_s: int = 20,
        keepalive_s: float = 15.0,
        max_channels: int = 8,
    ) -> None:
        self.inventory = inventory
        self.base_dir = base_dir
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.keepalive_s = keepalive_s
        self.max_channels = max_channels
        self._links: dict[str, _NodeLink] = {}

    def _link(self, node: str) -> _NodeLink:
        if node not in self._links:
            self._links[node] = _NodeLink(asyncio.Lock(), asyncio.Semaphore(self.max_channels))
        return self._links[node]

    def _path(self, value: str) -> str:
        return str((self.base_dir / Path(value).expanduser()).resolve())

    async def _connect(self, name: str, node: Node) -> asyncssh.SSHClientConnection:
        try:
            return await asyncio.wait_for(
                asyncssh.connect(
                    node.host,
                    node.port,
                    username=node.user,
                    client_keys=[self._path(node.key)] if node.key else None,
                    known_hosts=self._path(node.known_hosts),
                    agent_path=None,
                    config=None,
                    keepalive_interval=self.keepalive_s,
                    keepalive_count_max=3,
                    login_timeout=self.connect_timeout_s,
                ),
                self.connect_timeout_s,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise HostKeyError(
                f"{name}: host key of {node.host}:{node.port} is unknown or has changed - refused. "
                f"Verify the key and add it to {node.known_hosts}",
                name,
            ) from None
        except asyncssh.PermissionDenied:
            raise ConnectError(f"{name}: SSH login as {node.user} refused (key not accepted)", name) from None
        except TimeoutError:
            raise ConnectError(f"{name}: SSH connect to {node.host}:{node.port} timed out", name) from None
        except (OSError, asyncssh.Error) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(exc).__name__
            raise ConnectError(f"{name}: cannot connect to {node.host}:{node.port}: {reason}", name) from None

    async def connection(self, name: str) -> asyncssh.SSHClientConnection:
        node = self.inventory.node(name)
        link = self._link(name)
        async with link.lock:
            if link.conn is None or link.conn.is_closed():
                link.conn = await self._connect(name, node)
            return link.conn

    def _drop(self, name: str, conn: asyncssh.SSHClientConnection) -> None:
        link = self._link(name)
        if link.conn is conn:
            link.conn = None
        conn.abort()

    async def run(
        self,
        node: str,
        argv: Argv,
        *,
        timeout_s: int | None = None,
        ok_exit: tuple[int, ...] = (0,),
    ) -> CommandResult:
        """Run ``argv`` on ``node``; raise :class:`CommandFailed` unless its exit is in ``ok_exit``."""
        seconds = timeout_s or self.command_timeout_s
        command = to_command(with_timeout(seconds, argv))
        result = await self._run(node, command, seconds, argv, retry=True)
        if result.exit_status == 124:
            raise RemoteTimeout(node, seconds, f"`{argv[0]}`")
        if result.exit_status not in ok_exit:
            last = (result.stderr.strip().splitlines() or [""])[-1]  # pct dies with its reason as its last word
            if argv[:2] == ("pct", "exec") and argv[2].isdigit() and \
                    (refused := pct_refusal(node, int(argv[2]), last)) is not None:
                raise ContainerDown(node, argv, result.exit_status, result.stderr, refused[1],
                                    stopped=refused[0] is TargetState.STOPPED)
            raise CommandFailed(node, argv, result.exit_status, result.stderr, result.stdout)
        return result

    async def _run(self, node: str, command: str, seconds: int, argv: Argv, retry: bool) -> CommandResult:
        conn = await self.connection(node)
        link = self._link(node)
        async with link.channels:
            try:
                completed = await asyncio.wait_for(
                    conn.run(command, check=False, stdin=asyncssh.DEVNULL, encoding="utf-8", errors="replace"),
                    seconds + 5,  # the far side's `timeout -k 5` fires first
                )
            except asyncssh.ChannelOpenError:
                self._drop(node, conn)  # saturated or half-dead connection: start afresh once
                if retry:
                    return await self._run(node, command, seconds, argv, retry=False)
                raise ConnectError(f"{node}: SSH channel refused", node) from None
            except TimeoutError:
                self._drop(node, conn)
                raise RemoteTimeout(node, seconds, f"`{argv[0]}`") from None
            except (OSError, asyncssh.Error) as exc:
                self._drop(node, conn)
                raise ConnectError(f"{node}: connection lost ({type(exc).__name__})", node) from None
        exit_status = completed.exit_status
        if exit_status is None or exit_status < 0:
            if completed.exit_signal:
                raise CommandFailed(node, argv, exit_status, f"killed by signal {completed.exit_signal[0]}")
            self._drop(node, conn)
            raise ConnectError(f"{node}: connection closed before `{argv[0]}` finished", node)
        return CommandResult(exit_status, str(completed.stdout or ""), str(completed.stderr or ""))

    async def close(self) -> None:
        for link in self._links.values():
            if link.conn is not None:
                link.conn.close()
                try:
                    await asyncio.wait_for(link.conn.wait_closed(), 5)
                except TimeoutError:
                    link.conn.abort()  # a channel still open (a remote command that never ended)
                link.conn = None
