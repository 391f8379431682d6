"""Config loading from files, and the Redis store against a real redis-server."""

import asyncio

import pytest

from bot.config import Settings, load_inventory
from bot.errors import ConfigError, StoreError
from bot.store import EmbeddedRedis, Store, connect


def write(tmp_path, text):
    path = tmp_path / "inventory.yml"
    path.write_text(text)
    return path


def test_inventory_file_paths_are_checked(tmp_path):
    (tmp_path / "known_hosts").write_text("")
    path = write(tmp_path, "nodes:\n  pve5:\n    host: 10.0.0.5\n    key: missing_key\n    known_hosts: known_hosts\n")
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    assert str(path) in err.value.user_message and "nodes.pve5.key" in err.value.user_message


def test_inventory_yaml_error_has_a_line(tmp_path):
    path = write(tmp_path, "nodes:\n  pve5: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    assert "line" in err.value.user_message and "not valid YAML" in err.value.user_message


def test_missing_inventory_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_inventory(tmp_path / "nope.yml")
    assert "cannot read inventory" in err.value.user_message
    assert "give --inventory or GPUOPS_INVENTORY; inventory.example.yml shows the format" in err.value.user_message


def test_settings_from_environment_keep_secrets_secret(monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-very-secret")
    monkeypatch.setenv("GPUOPS_STATUS_DEADLINE_S", "7.5")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6390/0")
    settings = Settings()
    assert settings.slack_bot_token.get_secret_value() == "xoxb-very-secret"
    assert "xoxb-very-secret" not in repr(settings) and "xoxb-very-secret" not in str(settings.model_dump())
    assert settings.status_deadline_s == 7.5 and settings.redis_url == "redis://127.0.0.1:6390/0"


async def test_audit_stream_and_once(store):
    first = await store.audit(action="gpu.status", user="U1", result={"pve5": "ok"})
    await store.audit(action="gpu.status", user="U2")
    entries = await store.audit_entries()
    assert [e["user"] for e in entries] == ["U2", "U1"] and entries[1]["id"] == first
    assert entries[1]["result"] == '{"pve5": "ok"}'
    assert await store.once("click:1") is True
    assert await store.once("click:1") is False


async def test_status_snapshot_round_trip(store):
    await store.save_status("pve5", {"state": "ok", "gpus": 2})
    assert await store.last_status("pve5") == {"state": "ok", "gpus": 2}
    assert await store.last_status("pve6") is None


async def test_embedded_redis_keeps_data_across_a_restart(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis").start()
    store = Store(connect(server.url))
    await store.audit(action="gpu.status", user="U1")
    await store.close()
    await asyncio.to_thread(server.stop)
    server = EmbeddedRedis(tmp_path / "redis").start()
    store = Store(connect(server.url))
    try:
        assert [e["user"] for e in await store.audit_entries()] == ["U1"]
    finally:
        await store.close()
        server.stop()


def test_embedded_redis_refuses_a_data_dir_of_another_major_version(tmp_path):
    data = tmp_path / "redis"
    data.mkdir()
    (data / "redis-version").write_text("1.0.0")
    with pytest.raises(StoreError) as err:
        EmbeddedRedis(data).start()
    assert "written by Redis 1.0.0" in err.value.user_message


async def test_unreachable_redis_fails_fast(tmp_path):
    store = Store(connect(f"unix://{tmp_path}/no.sock"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(StoreError):
        await store.ping()
    assert loop.time() - started < 2.0
    await store.close()


async def test_attempt_history_survives_a_redis_restart(tmp_path):
    from bot.core.attempts import Attempt, AttemptStatus
    from bot.store import AttemptStore

    server = EmbeddedRedis(tmp_path / "redis").start()
    store = AttemptStore(connect(server.url))
    attempt = Attempt("a20261202-120000-abcd", "U1", "C1", "pve5", 129, "sglang-a6000", "/m", ("--tp", "2"), 30000,
                      1.0).moved(AttemptStatus.PLANNED, 1.0).moved(AttemptStatus.LAUNCHING, 2.0, "PID 7")
    await store.save(attempt)
    assert await store.lock("pve5", 129, attempt.id, 600) is None
    await store.redis.aclose()
    await asyncio.to_thread(server.stop)
    server = EmbeddedRedis(tmp_path / "redis").start()
    store = AttemptStore(connect(server.url))
    try:
        assert await store.recent("pve5", 129) == [attempt]
        assert await store.lock("pve5", 129, "another", 600) == attempt.id  # the lock survived too
        assert await store.unlock("pve5", 129, "another") is False  # only the holder releases it
    finally:
        await store.redis.aclose()
        server.stop()


async def test_two_replicas_share_one_posting_pace_per_channel(store, redis_url):
    """Each replica books its slot from one Redis timeline: together they still post one
    message per spacing to a channel, another channel is not held back, and a replica whose
    Redis is gone falls back to pacing itself (delayed, never dropped)."""
    import time

    from bot.slack import ChannelPace

    other = Store(connect(redis_url))
    spacing = 0.2
    replicas = [ChannelPace(spacing_s=spacing, shared=s.reserve_post_slot) for s in (store, other)]
    sent: list[tuple[str, float]] = []

    async def post(pace, channel):
        await pace.wait(channel)
        sent.append((channel, time.monotonic()))

    try:
        started = time.monotonic()
        await asyncio.gather(*(post(replicas[i % 2], "C0PACE") for i in range(8)), post(replicas[1], "C0OTHER"))
        times = sorted(t for c, t in sent if c == "C0PACE")
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert len(times) == 8 and min(gaps) >= spacing * 0.9, gaps
        assert times[-1] - started < 8 * spacing + 0.5
        assert next(t for c, t in sent if c == "C0OTHER") - started < spacing  # its own timeline
    finally:
        await other.close()

    gone = Store(connect("redis://127.0.0.1:1/0"))
    alone = ChannelPace(spacing_s=spacing, shared=gone.reserve_post_slot)
    started = time.monotonic()
    for _ in range(3):
        await alone.wait("C0PACE")
    assert 2 * spacing * 0.9 <= time.monotonic() - started < 2 * spacing + 3 * 2.5
    await gone.close()


async def test_a_server_still_running_is_found_however_many_attempts_came_after_it(store):
    from bot.core.attempts import Attempt, AttemptStatus
    from bot.store import AttemptStore

    attempts = AttemptStore(store.redis)

    def attempt(n, vmid, *moves):
        a = Attempt(f"a20261202-12{n // 100:02d}{n % 100:02d}-abcd", "U1", "C1", "pve5", vmid, None, "/m",
                    ("--tp", "2"), 30000, float(n))
        for i, status in enumerate(moves):
            a = a.moved(status, float(n) + i)
        return a

    launched = (AttemptStatus.PLANNED, AttemptStatus.LAUNCHING, AttemptStatus.READY)
    server = attempt(0, 129, *launched)
    await attempts.save(server)
    for n in range(1, 251):  # 250 later attempts on other containers, all finished
        await attempts.save(attempt(n, 130, AttemptStatus.PLANNED, AttemptStatus.FAILED))
    assert server.id not in {a.id for a in await attempts.recent(count=200)}
    assert [a.id for a in await attempts.with_status("ready")] == [server.id]
    await attempts.save(server.moved(AttemptStatus.STOPPED, 500.0))
    assert await attempts.with_status("ready") == []


async def test_the_threads_following_a_container_are_found_and_lapsed_ones_dropped(store):
    from bot.core.incident import Incident
    from bot.store import IncidentStore

    incidents = IncidentStore(store.redis)
    await incidents.save(Incident("C1", "111.1", node="pve5", vmid=129))
    await incidents.save(Incident("C2", "222.2", node="pve5", vmid=129))
    await incidents.save(Incident("C1", "333.3", node="pve5", vmid=130))
    await incidents.save(Incident("C1", "444.4"))  # not linked to a container yet
    assert [(i.channel, i.thread_ts) for i in await incidents.following("pve5", 129)] == [("C1", "111.1"),
                                                                                        ("C2", "222.2")]
    await store.redis.delete("gpuops:incident:C2:222.2")  # its 30 days ran out
    assert [i.thread_ts for i in await incidents.following("pve5", 129)] == ["111.1"]
    assert await store.redis.smembers("gpuops:incidents:pve5:129") == {"C1|111.1"}


async def test_changes_to_one_thread_from_two_replicas_are_made_one_at_a_time(store, redis_url):
    """Each change reads the thread's record, works (SSH, Slack) and saves under the thread's lock: from two
    replicas at once, none saves over another's hypothesis; another thread is not held up."""
    import asyncio

    from bot.core.incident import Incident
    from bot.store import IncidentStore

    replicas = [IncidentStore(store.redis), IncidentStore(Store(connect(redis_url)).redis)]
    await replicas[0].save(Incident("C1", "111.1"))

    async def add(replica: IncidentStore, n: int) -> None:
        async with replica.locked("C1", "111.1"):
            incident = await replica.get("C1", "111.1")
            assert incident is not None
            await asyncio.sleep(0.01)  # the work between read and save
            await replica.save(incident.add_hypothesis(f"hypothesis {n}", "U1", float(n))[0])

    async def other_thread() -> None:
        async with replicas[1].locked("C1", "222.2"):
            await replicas[1].save(Incident("C1", "222.2"))

    await asyncio.gather(*(add(replicas[n % 2], n) for n in range(12)), other_thread())
    incident = await replicas[1].get("C1", "111.1")
    assert incident is not None
    assert sorted(h.text for h in incident.hypotheses) == sorted(f"hypothesis {n}" for n in range(12))
    assert [h.id for h in incident.hypotheses] == [f"H{n}" for n in range(1, 13)]
    assert await replicas[0].get("C1", "222.2") is not None
    assert not await store.redis.exists("gpuops:incident-lock:C1:111.1")  # released


async def test_an_attempt_changed_by_two_writers_at_once_keeps_both_changes(store, redis_url):
    """The launch's follower finishing an attempt while a triage (on another replica) adds its label: each change is
    made on the record as it is, so neither the status nor the label is lost, and the running set follows."""
    import asyncio
    from dataclasses import replace

    from bot.core.attempts import Attempt, AttemptStatus
    from bot.store import AttemptStore

    one, other = AttemptStore(store.redis), AttemptStore(Store(connect(redis_url)).redis)
    attempt = Attempt(id="a20261204-120000-abcd", user="U1", channel="C1", node="pve5", vmid=129, container="ct",
                      model_path="/m", argv=("--tp", "2"), port=30000, created_at=1.0)
    attempt = attempt.moved(AttemptStatus.PLANNED, 1.0, "").moved(AttemptStatus.LAUNCHING, 2.0, "")
    await one.save(attempt)

    async def label(n: int) -> None:
        await other.change(attempt.id, lambda a: replace(a, observed={**a.observed, f"label{n}": n}))

    def finish(a: Attempt) -> Attempt | None:
        return a.moved(AttemptStatus.FAILED, 3.0, "boom") if a.status is AttemptStatus.LAUNCHING else None

    results = await asyncio.gather(*(label(n) for n in range(10)), one.change(attempt.id, finish),
                                   one.change(attempt.id, finish))
    stored = await one.get(attempt.id)
    assert stored is not None and stored.status is AttemptStatus.FAILED
    assert [t.status for t in stored.transitions].count(AttemptStatus.FAILED) == 1  # finished once, not twice
    assert stored.observed == {f"label{n}": n for n in range(10)}
    assert any(r is not None and r.status is AttemptStatus.FAILED for r in results)
    assert not await store.redis.sismember("gpuops:attempts:active", attempt.id)
    assert await one.change("a20000101-000000-0000", finish) is None  # no such attempt


async def test_running_attempts_saved_before_the_running_set_are_backfilled_once(store):
    from bot.core.attempts import Attempt, AttemptStatus
    from bot.store import ACTIVE_SET, AttemptStore

    attempts = AttemptStore(store.redis)

    def attempt(n, *moves):
        a = Attempt(f"a20261203-13{n // 100:02d}{n % 100:02d}-abcd", "U1", "C1", "pve5", 129, None, "/m",
                    ("--tp", "2"), 30000, float(n))
        for i, status in enumerate(moves):
            a = a.moved(status, float(n) + i)
        return a

    old = attempt(0, AttemptStatus.PLANNED, AttemptStatus.LAUNCHING, AttemptStatus.READY)
    await attempts.save(old)
    for n in range(1, 1201):  # more than two chunks of later, finished attempts
        await attempts.save(attempt(n, AttemptStatus.PLANNED, AttemptStatus.FAILED))
    await store.redis.delete(ACTIVE_SET)  # as a record saved before the running set existed left it
    assert await attempts.with_status("ready") == []  # the set alone answers running states now
    assert await attempts.backfill_active(chunk=500) == 1
    assert [a.id for a in await attempts.with_status("ready")] == [old.id]
    assert await attempts.backfill_active() == 0  # once per Redis
    # a member whose record stopped running (a save that raced the backfill) is dropped on the next read
    await store.redis.sadd(ACTIVE_SET, attempt(7).id)
    assert [a.id for a in await attempts.with_status("ready", "launching")] == [old.id]
    assert attempt(7).id not in {str(m) for m in await store.redis.smembers(ACTIVE_SET)}
    # other states still come from the most recent attempts
    assert len(await attempts.with_status("failed")) == 200


async def test_a_failed_launch_whose_server_was_left_running_is_named_however_many_attempts_came_after_it(store):
    """A failed launch whose server still holds its GPUs stays in the running set until its server is recorded gone:
    /gpu status names its processes and /gpu free leaves them to a stop, however old it is (before: only among the
    latest 200 attempts), and a Redis whose set was filled before it kept those gets them on its next backfill."""

    from bot.core.attempts import Attempt, AttemptStatus
    from bot.status import running_launches
    from bot.store import ACTIVE_SET, AttemptStore

    attempts = AttemptStore(store.redis)
    left = Attempt("a20261203-120000-abcd", "U1", "C1", "pve5", 129, None, "/m", ("--tp", "2"), 30000, 0.0,
                   pid=4242, observed={"stage": "ready"})
    left = left.moved(AttemptStatus.PLANNED, 0).moved(AttemptStatus.LAUNCHING, 1).moved(
        AttemptStatus.FAILED, 2, "server said ready but the health check failed")
    assert left.left_running
    await attempts.save(left)
    for n in range(1, 251):  # later attempts elsewhere, all finished
        later = Attempt(f"a20261203-13{n // 100:02d}{n % 100:02d}-abcd", "U1", "C1", "pve6", 131, None, "/m", (),
                        30000, float(n))
        await attempts.save(later.moved(AttemptStatus.PLANNED, float(n)).moved(AttemptStatus.FAILED, float(n)))
    assert await running_launches(attempts) == {("pve5", 129, 4242): left}
    assert [a.id for a in await attempts.holding_servers()] == [left.id]
    await store.redis.delete(ACTIVE_SET, "gpuops:attempts:active:backfilled:2")  # as a set filled before it kept them
    assert await attempts.backfill_active(chunk=100) == 1 and await running_launches(attempts) == {
        ("pve5", 129, 4242): left}
    ended = left.with_server_ended({"exited": "the server's process (PID 4242) exited", "at": 3.0})
    await attempts.save(ended)
    assert await attempts.holding_servers() == [] and await running_launches(attempts) == {}


# another gpuops process on the same data dir: it uses the embedded Redis there, holds a connection until a line
# comes on stdin, then closes it and stops its EmbeddedRedis
HOLDER = """
import asyncio, sys
from pathlib import Path
from bot.store import EmbeddedRedis, Store, connect

async def main():
    embedded = EmbeddedRedis(Path(sys.argv[1])).start()
    store = Store(connect(embedded.url))
    await store.audit(action="sglang.stop", user="cli:holder")
    print("started" if embedded.process is not None else "shared", flush=True)
    sys.stdin.readline()
    await store.close()
    embedded.stop()

asyncio.run(main())
"""


async def test_two_processes_on_one_data_dir_share_its_redis_and_the_last_to_leave_stops_it(tmp_path):
    """The bot and a `gpuops` command in another terminal default to one data dir: the second uses the first's
    server (a second redis-server would append to the same AOF, and remove the first's socket when it stops)."""
    started = []  # every redis-server this test made, stopped at the end if it is still running
    try:
        await _share_one_data_dir(tmp_path, started)
    finally:
        for server in started:
            if server.poll() is None:
                server.kill()
                server.wait(5)


async def _share_one_data_dir(tmp_path, started):
    import subprocess
    import sys

    import yaml

    from tests.conftest import ROOT

    data = tmp_path / "data" / "redis"

    def start():
        embedded = EmbeddedRedis(data).start()
        if embedded.process is not None:
            started.append(embedded.process)
        return embedded

    bot = start()
    bot_store = Store(connect(bot.url))
    await bot_store.audit(action="gpu.status", user="U1")

    # a terminal's `gpuops history` while the bot runs
    (tmp_path / "key").write_text("")
    (tmp_path / "known_hosts").write_text("")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"nodes": {"pve5": {"host": "127.0.0.1", "key": "key",
                                                            "known_hosts": "known_hosts"}}}))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUOPS_DATA_DIR": str(tmp_path / "data")}
    history = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "history", "--inventory",
                                                       str(inventory)], capture_output=True, text=True, cwd=ROOT,
                                      env=env, timeout=60)
    assert history.returncode == 0, history.stderr
    assert bot.process.poll() is None and bot.socket_path.exists()  # its server stays, socket and all
    fresh = Store(connect(bot.url))  # a new connection, as the bot's pool makes them, still reaches it
    assert [e["user"] for e in await fresh.audit_entries()] == ["U1"]
    await fresh.close()

    # the bot stops first while another process uses the server: it stays for that one, which stops it leaving
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(data)], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert await asyncio.to_thread(holder.stdout.readline) == "shared\n"
        await bot_store.close()
        await asyncio.to_thread(bot.stop)
        assert started[0].poll() is None
        holder.stdin.write("done\n")
        holder.stdin.flush()
        assert await asyncio.to_thread(holder.wait, 30) == 0, holder.stdout.read()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)
    assert started[0].wait(10) == 0  # the last to leave: SHUTDOWN, the server writes its AOF and exits
    assert not bot.socket_path.exists()

    # alone on a server it started, a process stops it even with a client of its own left open
    again = start()
    assert len(started) == 2
    forgotten = Store(connect(again.url))
    assert [e["action"] for e in await forgotten.audit_entries()] == ["sglang.stop", "gpu.status"]
    await asyncio.to_thread(again.stop)
    assert started[1].wait(10) == 0
    await forgotten.close()
