"""Ack latency of signed slash commands against the real app (lab on loopback).

    python bench/ack_latency.py [--requests 30]

Sends signed `/gpu status all` requests one at a time and prints the median and p90 time to
the HTTP 200 (Slack allows 3 s), next to the median time until the answer is posted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.lab.console import Lab  # noqa: E402


async def main(requests: int) -> None:
    lab = Lab(Path(tempfile.mkdtemp(prefix="gpuops-bench-")))
    await lab.start()
    try:
        acks, answers = [], []
        for _ in range(requests):
            before = len(lab.standin.of("chat.postMessage"))
            t0 = time.perf_counter()
            status, _, _ = await lab.slash("/gpu", "status all")
            # lab.slash returns after the answer is posted; time the ack separately below
            answers.append(time.perf_counter() - t0)
            assert status == 200 and len(lab.standin.of("chat.postMessage")) > before
        import aiohttp

        from bot.slack_standin import signed_headers, slash_body

        async with aiohttp.ClientSession() as http:
            for _ in range(requests):
                body = slash_body("/gpu", "help")
                t0 = time.perf_counter()
                async with http.post(lab.app_url, data=body, headers=signed_headers(lab.signing_secret, body)) as r:
                    await r.text()
                acks.append(time.perf_counter() - t0)
        q = statistics.quantiles
        print(f"requests: {requests} each; lab nodes: {', '.join(f'{n}={x.kind}' for n, x in lab.nodes.items())}")
        print(f"ack (HTTP 200, /gpu help):         median {statistics.median(acks) * 1000:.1f} ms, "
              f"p90 {q(acks, n=10)[-1] * 1000:.1f} ms")
        print(f"answer posted (/gpu status all):   median {statistics.median(answers) * 1000:.0f} ms, "
              f"p90 {q(answers, n=10)[-1] * 1000:.0f} ms (3 targets, one unreachable)")
    finally:
        await lab.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=30)
    asyncio.run(main(parser.parse_args().requests))
