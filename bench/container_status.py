"""What the CUDA devices check adds to a container's status: its GPUs alone vs its GPUs and the check, side by side.

    python bench/container_status.py [--runs 15] [--ssh openssh|asyncssh]

Starts one lab node (a real SSH server on 127.0.0.1 acting as a Proxmox node, its container 129 seeded with the
NVIDIA device nodes) and, with a warm connection, alternates the two reads of that container: `read_target_gpus`
(nvidia-smi inside it and on the node) and `read_target` (the same, with `pct config` and `stat` of the device nodes
read alongside). Prints each median, the ratio, and the extra SSH commands. Loopback only.
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
from bot.core.status import DEFAULT_THRESHOLDS  # noqa: E402
from bot.lab.nodes import seed_node_state, sshd_path, start_node  # noqa: E402
from bot.ssh import SshTransport  # noqa: E402
from bot.status import read_target, read_target_gpus  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ssh", default="openssh" if sshd_path() else "asyncssh")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    node = await start_node(workdir / "pve5", "pve5", seed_node_state("pve5"), prefer=args.ssh)
    inventory = parse_inventory({"nodes": {"pve5": node.inventory_entry()},
                                 "containers": {"sglang-a6000": {"node": "pve5", "vmid": 129}}}, "bench")
    transport = SshTransport(inventory)
    (target,) = resolve_targets("sglang-a6000", inventory)
    try:
        await read_target(transport, inventory, target, DEFAULT_THRESHOLDS)  # warm the connection
        gpus, with_check, commands = [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            await read_target_gpus(transport, inventory, target, DEFAULT_THRESHOLDS)
            gpus.append(time.perf_counter() - t0)
            before = len(node.calls())
            t0 = time.perf_counter()
            status = await read_target(transport, inventory, target, DEFAULT_THRESHOLDS)
            with_check.append(time.perf_counter() - t0)
            commands.append(len(node.calls()) - before)
            assert status.devices is not None and status.devices[0] == "ok", status.devices
    finally:
        await transport.close()
        await node.stop()
    alone, checked = statistics.median(gpus), statistics.median(with_check)
    print(f"ssh server: {args.ssh}; runs per figure: {args.runs}; warm connection")
    print(f"container status, GPUs alone:           {alone * 1000:7.0f} ms (median)")
    print(f"container status, GPUs + CUDA devices:  {checked * 1000:7.0f} ms (median)")
    print(f"with the check / without: {checked / alone:.2f}; commands logged by the node per read with the check: "
          f"{statistics.median(commands):.0f}")


if __name__ == "__main__":
    asyncio.run(main())
