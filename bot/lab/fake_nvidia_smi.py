"""Lab stand-in for nvidia-smi on a Proxmox node (stdlib only; installed on the node's PATH).

Answers the structured queries the bot makes from the node's scenario file
``$FAKE_PVE_STATE/node.json``. Inside a container (``FAKE_CT`` set by the fake pct) it shows
only the GPUs passed to that container and, like the real thing in a PID namespace, no
processes. Knobs in the scenario: ``smi: {"error": <banner text>, "exit": N, "sleep": S,
"invalid_fields": [...], "p2p": <status of every GPU pair>}`` at node or container level. A process
entry with ``"while_running": true`` is listed only while its PID exists.
"""

import json
import os
import sys
import time

FIELD_UNITS = {
    "memory.used": "MiB", "memory.total": "MiB", "memory.free": "MiB", "utilization.gpu": "%",
    "power.draw": "W", "power.limit": "W", "fan.speed": "%", "used_memory": "MiB", "used_gpu_memory": "MiB",
}
GPU_KEYS = {
    "index": "index", "uuid": "uuid", "name": "name", "pci.bus_id": "pci_bus_id",
    "memory.used": "memory_used_mib", "memory.total": "memory_total_mib", "utilization.gpu": "utilization_pct",
    "temperature.gpu": "temperature_c", "power.draw": "power_draw_w", "power.limit": "power_limit_w",
    "fan.speed": "fan_pct", "pstate": "perf_state", "compute_mode": "compute_mode",
    # memory-error counters: a GPU without the key prints [N/A], as GeForce cards and ECC-off GPUs do
    "ecc.mode.current": "ecc_mode", "ecc.mode.pending": "ecc_mode_pending",
    "ecc.errors.corrected.volatile.total": "ecc_corrected_volatile",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected_volatile",
    "ecc.errors.uncorrected.aggregate.total": "ecc_uncorrected_aggregate",
    "retired_pages.single_bit_ecc.count": "retired_sbe", "retired_pages.double_bit.count": "retired_dbe",
    "retired_pages.pending": "retired_pending", "remapped_rows.correctable": "remapped_correctable",
    "remapped_rows.uncorrectable": "remapped_uncorrectable", "remapped_rows.pending": "remapped_pending",
    "remapped_rows.failure": "remapped_failure",
}
APP_KEYS = {"gpu_uuid": "gpu_uuid", "pid": "pid", "process_name": "name", "used_memory": "used_mib",
            "used_gpu_memory": "used_mib"}


def fail(message, code=2):
    print(message)
    sys.exit(code)


def cell(value, field, units):
    if value is None:
        return "[N/A]"
    if isinstance(value, float):
        value = f"{value:.2f}"
    unit = FIELD_UNITS.get(field)
    return f"{value} {unit}" if units and unit else str(value)


def csv_out(rows, fields, keys, header, units):
    for f in fields:  # the real tool refuses the whole query before printing anything
        if f not in keys:
            fail(f'Field "{f}" is not a valid field to query.')
    if header:
        print(", ".join(f"{f} [{FIELD_UNITS[f]}]" if units and f in FIELD_UNITS else f for f in fields))
    for row in rows:
        values = []
        for f in fields:
            values.append(cell(row.get(keys[f]), f, units))
        print(", ".join(values))


def listed_processes(node):
    """The scenario's GPU processes that hold memory now: a ``while_running`` one (a holder the lab spawned and
    reaps) only while its PID exists, its memory gone with it."""
    return [p for p in node.get("processes", []) if not p.get("while_running") or os.path.exists(f"/proc/{p['pid']}")]


def orphaned(gpu):
    """Memory the GPU holds with no process listed: for as long as ``orphaned_while_pid`` runs, when it is set (a
    process that holds the GPU open keeps the memory a dead one left)."""
    keeper = gpu.get("orphaned_while_pid")
    return gpu.get("orphaned_mib", 0) if keeper is None or os.path.exists(f"/proc/{keeper}") else 0


def gpu_used(gpu, processes, extra):
    return gpu.get("memory_used_mib", 1) + sum(p["used_mib"] for p in processes if p["gpu_uuid"] == gpu["uuid"]) + extra


def main(argv):
    state_dir = os.environ.get("FAKE_PVE_STATE", ".")
    with open(os.path.join(state_dir, "node.json")) as fh:
        node = json.load(fh)
    ct = os.environ.get("FAKE_CT")
    container = node.get("containers", {}).get(ct, {}) if ct else None
    knobs = dict(node.get("smi", {}))
    if container is not None:
        knobs.update(container.get("smi", {}))
    if knobs.get("sleep"):
        time.sleep(float(knobs["sleep"]))
    if knobs.get("error"):
        print(knobs["error"].rstrip("\n"))
        sys.exit(int(knobs.get("exit", 9)))
    processes = listed_processes(node)
    gpus = node["gpus"]
    if container is not None:
        gpus = [g for g in gpus if g["index"] in container.get("gpus", [])]
    rows = [dict(g, memory_used_mib=gpu_used(g, processes, orphaned(g)),
                 driver_version=node["driver_version"]) for g in gpus]
    visible_procs = [] if container is not None else processes
    query = next((a for a in argv if a.startswith(("--query-gpu=", "--query-compute-apps="))), None)
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), None)
    if query:
        fmt = fmt or ""
        if not fmt or not fmt.startswith("csv"):
            fail("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
        opts = fmt.split(",")
        kind, fields = query.split("=", 1)
        fields = fields.split(",")
        if kind == "--query-gpu":
            keys = dict(GPU_KEYS, driver_version="driver_version")
            for unknown in knobs.get("invalid_fields", []):  # an older driver's field list
                keys.pop(unknown, None)
            csv_out(rows, fields, keys, "noheader" not in opts, "nounits" not in opts)
        else:
            csv_out(visible_procs, fields, APP_KEYS, "noheader" not in opts, "nounits" not in opts)
        return
    if argv[:2] == ["-q", "-x"]:
        print('<?xml version="1.0" ?>')
        print('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">')
        print("<nvidia_smi_log>")
        print(f"\t<driver_version>{node['driver_version']}</driver_version>")
        print(f"\t<cuda_version>{node['cuda_version']}</cuda_version>")
        print(f"\t<attached_gpus>{len(gpus)}</attached_gpus>")
        for g in gpus:
            print(f'\t<gpu id="{g["pci_bus_id"]}">')
            print(f"\t\t<product_name>{g['name']}</product_name>")
            print(f"\t\t<compute_mode>{g.get('compute_mode', 'Default')}</compute_mode>")
            print("\t</gpu>")
        print("</nvidia_smi_log>")
        return
    if argv == ["topo", "-p2p", "r"]:
        # the real layout: tab-separated, rows indented, GPUs numbered as this namespace sees them;
        # scenario knob "p2p": the status of every pair ("OK" unless set, e.g. "CNS")
        status = knobs.get("p2p", "OK")
        print("\t" + "\t".join(f"GPU{i}" for i in range(len(gpus))))
        for i in range(len(gpus)):
            print(f" GPU{i}\t" + "\t".join("X" if i == j else status for j in range(len(gpus))))
        print("\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
              "  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n  U    = Unknown")
        return
    if argv == ["-L"]:
        for g in gpus:
            print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        return
    fail("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")


if __name__ == "__main__":
    main(sys.argv[1:])
