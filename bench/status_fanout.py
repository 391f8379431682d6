"""How `all` scales with the number of nodes: one node's status vs N nodes', side by side.

    python bench/status_fanout.py [--nodes 1,4,8] [--runs 7] [--ssh openssh|asyncssh] [--latency S]

Starts N lab nodes (real SSH servers on 127.0.0.1 acting as Proxmox nodes) and times
read_status over 1 node and over all N with a warm connection pool, then prints medians
and the ratio N-node/1-node. Loopback only.

All "nodes" share this machine's CPU, unlike real Proxmox hosts: where the per-command CPU
cost of the lab's shell dominates (root's pyenv .bashrc costs ~110 ms a command under
OpenSSH), the figure measures this machine's cores, not the bot. ``--latency S`` makes each
fake nvidia-smi wait S seconds, modelling work done on the remote host.
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

from bot.config import parse_inventory  # noqa: E402
from bot.core.inventory import resolve_targets  # noqa: E402
from bot.lab.nodes import seed_node_state, sshd_path, start_node  # noqa: E402
from bot.ssh import SshTransport  # noqa: E402
from bot.status import read_status  # noqa: E402


async def measure(count: int, runs: int, kind: str, workdir: Path, latency: float) -> tuple[float, float, float]:
    nodes = []
    for i in range(count):
        state = seed_node_state(f"pve{i}")
        if latency:
            state["smi"] = {"sleep": latency}
        nodes.append(await start_node(workdir / f"n{count}-{i}-{latency}", f"pve{i}", state, prefer=kind))
    inventory = parse_inventory({"nodes": {n.name: n.inventory_entry() for n in nodes}}, "bench")
    transport = SshTransport(inventory)
    try:
        await read_status(transport, inventory, resolve_targets("all", inventory))  # warm the connections
        one, every, cpu = [], [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            await read_status(transport, inventory, resolve_targets("pve0", inventory))
            one.append(time.perf_counter() - t0)
            t0, c0 = time.perf_counter(), time.process_time()
            report = await read_status(transport, inventory, resolve_targets("all", inventory))
            every.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)  # the bot's own CPU (the lab servers run elsewhere)
            assert all(s.state.value == "ok" for s in report.statuses)
        return statistics.median(one), statistics.median(every), statistics.median(cpu)
    finally:
        await transport.close()
        for node in nodes:
            await node.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="1,4,8")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--ssh", default="openssh" if sshd_path() else "asyncssh")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each nvidia-smi call waits")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    print(f"ssh server: {args.ssh}; nvidia-smi latency {args.latency}s; runs per figure: {args.runs}; warm pool")
    print(f"{'nodes':>5}  {'one node (median)':>18}  {'all nodes (median)':>19}  {'all/one':>7}  "
          f"{'bot CPU for all':>15}")
    for count in (int(n) for n in args.nodes.split(",")):
        one, every, cpu = await measure(count, args.runs, args.ssh, workdir, args.latency)
        print(f"{count:>5}  {one * 1000:>15.0f} ms  {every * 1000:>16.0f} ms  {every / one:>7.2f}  "
              f"{cpu * 1000:>12.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
