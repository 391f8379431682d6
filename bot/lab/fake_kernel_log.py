"""Lab stand-in for ``journalctl`` and ``dmesg`` on a Proxmox node (stdlib only).

Prints the node scenario's kernel log: ``node.json`` key ``kernel_log`` holds lines as the
real tools print them with ISO times. Knobs: ``kernel_log_source`` = ``journal`` (default:
journalctl answers), ``ring`` (no journal: journalctl fails, dmesg answers) or ``none``
(neither is readable, like an unprivileged container).
"""

import json
import os
import sys


def main(argv):
    tool = os.path.basename(argv[0])
    with open(os.path.join(os.environ.get("FAKE_PVE_STATE", "."), "node.json")) as fh:
        node = json.load(fh)
    source = node.get("kernel_log_source", "journal")
    lines = node.get("kernel_log", [])
    if tool == "journalctl":
        if source != "journal":
            print("Failed to open journal: No such file or directory", file=sys.stderr)
            return 1
        for line in lines:  # "2026-12-03T06:10:00+0000 pve5 kernel: NVRM: ..."
            print(line)
        return 0
    if source == "none":
        print("dmesg: read kernel buffer failed: Operation not permitted", file=sys.stderr)
        return 1
    for line in lines:  # dmesg --time-format=iso prints no host or "kernel:" tag
        stamp, _, rest = line.partition(" ")
        print(stamp + " " + rest.split("kernel: ", 1)[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
