"""Posting pace to one channel when several replicas post at once: per-process vs shared.

    python bench/channel_pace.py [--replicas 3] [--posts 4] [--spacing 1.0]

Each replica is a ChannelPace with its own Store client on one real Redis (embedded, or
REDIS_URL). Every replica posts ``--posts`` messages to the same channel at the same moment.
Printed side by side, from one run: the gaps between consecutive posts (min and median), how
many gaps are under the spacing (Slack's ~1 message/s/channel), and the total time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.slack import ChannelPace  # noqa: E402
from bot.store import Store, connect, scratch_redis  # noqa: E402


async def burst(paces: list[ChannelPace], posts: int, channel: str) -> list[float]:
    sent: list[float] = []

    async def post(pace: ChannelPace) -> None:
        await pace.wait(channel)
        sent.append(time.monotonic())

    await asyncio.gather(*(post(p) for p in paces for _ in range(posts)))
    return sorted(sent)


def describe(name: str, times: list[float], started: float, spacing: float) -> str:
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    short = sum(1 for g in gaps if g < spacing * 0.95)
    return (f"{name:<22} posts {len(times):>3}  gap min {min(gaps):.3f} s  median {statistics.median(gaps):.3f} s  "
            f"gaps under {spacing:g} s: {short:>2}/{len(gaps)}  total {times[-1] - started:.2f} s")


async def main(replicas: int, posts: int, spacing: float) -> None:
    with scratch_redis("gpuops-bench-redis-") as url:
        stores = [Store(connect(url)) for _ in range(replicas)]
        try:
            local = [ChannelPace(spacing_s=spacing) for _ in range(replicas)]
            shared = [ChannelPace(spacing_s=spacing, shared=s.reserve_post_slot) for s in stores]
            print(f"{replicas} replicas x {posts} posts to one channel, spacing {spacing:g} s, "
                  f"Redis {url.split('@')[-1]}")
            t0 = time.monotonic()
            print(describe("per-process pace", await burst(local, posts, "C0BENCHA"), t0, spacing))
            t0 = time.monotonic()
            print(describe("shared pace (Redis)", await burst(shared, posts, "C0BENCHB"), t0, spacing))
        finally:
            for s in stores:
                await s.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--posts", type=int, default=4)
    parser.add_argument("--spacing", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(main(args.replicas, args.posts, args.spacing))
