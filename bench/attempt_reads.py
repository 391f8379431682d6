"""Reading the running attempts, as /gpu status, the watch and the health post do, with a long history.

    python bench/attempt_reads.py [--history 2000] [--running 3] [--rounds 30]

Side by side on one real Redis (embedded, or REDIS_URL): the read before this change (the 200 most recent
attempts, one GET each, plus the running set's members one GET each) and the read now (the running set's
members in one MGET). Prints the median and p90 of each and their ratio, and checks both find the same servers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.attempts import ACTIVE, Attempt, AttemptStatus  # noqa: E402
from bot.store import ACTIVE_SET, PREFIX, AttemptStore, Store, connect, scratch_redis  # noqa: E402


async def before(attempts: AttemptStore) -> set[str]:
    """The read as it was: recent(200) with one GET per attempt, then the running set's members one by one."""
    ids = await attempts.redis.zrevrange(f"{PREFIX}attempts", 0, 199)
    found = {a.id: a for a in [await attempts.get(str(i)) for i in ids] if a is not None}
    for member in await attempts.redis.smembers(ACTIVE_SET):
        if str(member) not in found and (a := await attempts.get(str(member))) is not None:
            found[a.id] = a
    return {a.id for a in found.values() if a.status in ACTIVE}


async def now(attempts: AttemptStore) -> set[str]:
    return {a.id for a in await attempts.with_status(*(s.value for s in ACTIVE))}


def attempt(n: int, running: bool) -> Attempt:
    a = Attempt(f"a20261203-{n // 10000:02d}{n % 10000:04d}-bnch", "U1", "C1", "pve5", 129 + n % 3, None, "/m",
                ("--tp", "2", "--mem-fraction-static", "0.88"), 30000, float(n))
    a = a.moved(AttemptStatus.PLANNED, float(n)).moved(AttemptStatus.LAUNCHING, float(n) + 1)
    return a.moved(AttemptStatus.READY if running else AttemptStatus.FAILED, float(n) + 2)


async def timed(read, attempts: AttemptStore, rounds: int) -> tuple[list[float], set[str]]:
    times, found = [], set()
    for _ in range(rounds):
        t0 = time.perf_counter()
        found = await read(attempts)
        times.append((time.perf_counter() - t0) * 1000)
    return times, found


def describe(label: str, times: list[float]) -> str:
    p90 = sorted(times)[int(0.9 * (len(times) - 1))]
    return f"{label:<44} median {statistics.median(times):7.2f} ms  p90 {p90:7.2f} ms"


async def main(history: int, running: int, rounds: int) -> None:
    with scratch_redis("gpuops-bench-redis-") as url:
        store = Store(connect(url))
        try:
            attempts = AttemptStore(store.redis)
            servers = set(range(0, history, max(1, history // running)))  # spread through the history
            for n in range(history):
                await attempts.save(attempt(n, n in servers))
            print(f"{history} attempts recorded, {len(servers)} still running; {rounds} reads each; "
                  f"Redis {url.split('@')[-1]}")
            old_times, old_found = await timed(before, attempts, rounds)
            new_times, new_found = await timed(now, attempts, rounds)
            print(describe("before: recent 200 + set, one GET each", old_times))
            print(describe("now: running set, one MGET", new_times))
            ratio = statistics.median(old_times) / statistics.median(new_times)
            print(f"ratio (median before / now): {ratio:.1f}x; same servers found: {old_found == new_found} "
                  f"({len(new_found)})")
        finally:
            await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--running", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.history, args.running, args.rounds))
