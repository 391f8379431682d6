"""Lab stand-in for Proxmox's ``pct`` (stdlib only; installed on the node's PATH).

``pct exec <vmid> [--keep-env 0|1] -- <argv...>`` execs argv verbatim, without a shell, as
lxc-attach does, after checking the container exists and runs; the container's /dev is the stand-in's,
so ``stat`` of a /dev path is answered from the container's state. Every call is appended to
``$FAKE_PVE_STATE/calls.log`` as a JSON argv, so tests can see exactly what arrived.
"""

import json
import os
import sys


def fail_once(state_dir, argv):
    """Whether this command is one the lab was asked to fail (``fail_next.json``: the program it runs, and how many
    times in a row): a transient failure, as a dropped connection or a busy node gives; the file is removed once
    used up."""
    path = os.path.join(state_dir, "fail_next.json")
    try:
        with open(path) as fh:
            asked = json.load(fh)
        program, times = asked["program"], int(asked.get("times", 1))
    except (OSError, ValueError, KeyError):
        return False
    if argv[:1] != [program]:
        return False
    if times > 1:
        with open(path, "w") as fh:
            json.dump({"program": program, "times": times - 1}, fh)
        return True
    try:
        os.remove(path)
    except FileNotFoundError:
        return False  # another command took it first
    return True


def main(argv):
    state_dir = os.environ.get("FAKE_PVE_STATE", ".")
    with open(os.path.join(state_dir, "calls.log"), "a") as log:
        log.write(json.dumps(["pct", *argv]) + "\n")
    with open(os.path.join(state_dir, "node.json")) as fh:
        node = json.load(fh)
    containers = node.get("containers", {})
    if not argv:
        print("ERROR: no command specified", file=sys.stderr)
        sys.exit(255)
    if argv[0] == "list":
        print("VMID       Status     Lock         Name")
        for vmid, ct in sorted(containers.items()):
            print(f"{vmid:<10} {ct.get('status', 'running'):<10} {'':<12} {ct.get('name', '')}")
        return
    if argv[0] == "status" and len(argv) == 2:
        ct = containers.get(argv[1])
        if ct is None:
            print(f"Configuration file 'nodes/{node['name']}/lxc/{argv[1]}.conf' does not exist", file=sys.stderr)
            sys.exit(255)
        print(f"status: {ct.get('status', 'running')}")
        return
    if argv[0] == "config" and len(argv) == 2:
        ct = containers.get(argv[1])
        if ct is None:
            print(f"Configuration file 'nodes/{node['name']}/lxc/{argv[1]}.conf' does not exist", file=sys.stderr)
            sys.exit(255)
        print(f"arch: amd64\ncores: 16\nhostname: {ct.get('name', 'ct' + argv[1])}\n"
              f"memory: {ct.get('memory_mib', 65536)}\nswap: {ct.get('swap_mib', 512)}")
        for i, path in enumerate(ct.get("devices", [])):
            print(f"dev{i}: {path},gid=44")
        for line in ct.get("config_lines", []):  # raw lxc.* keys, as `pct config` prints them
            print(line)
        return
    if argv[0] != "exec" or len(argv) < 2:
        print(f"ERROR: unknown command 'pct {' '.join(argv[:1])}'", file=sys.stderr)
        sys.exit(255)
    vmid, rest = argv[1], argv[2:]
    if rest[:2] == ["--keep-env", "0"] or rest[:2] == ["--keep-env", "1"]:
        rest = rest[2:]
    if rest[:1] != ["--"] or len(rest) < 2:
        print("400 not enough arguments\npct exec <vmid> [<extra-args>] [OPTIONS]", file=sys.stderr)
        sys.exit(255)
    ct = containers.get(vmid)
    if ct is None:
        print(f"Configuration file 'nodes/{node['name']}/lxc/{vmid}.conf' does not exist", file=sys.stderr)
        sys.exit(255)
    if fail_once(state_dir, rest[1:]):
        print("lab: this pct exec failed, as the lab was asked to make the next one like it fail", file=sys.stderr)
        sys.exit(255)
    if ct.get("status", "running") != "running":
        print(f"CT {vmid} not running", file=sys.stderr)
        sys.exit(255)
    if rest[1] == "stat" and any(arg.startswith("/dev/") for arg in rest[2:]):
        sys.exit(stat_devices(ct.get("dev_nodes", {}), rest[2:]))
    env = dict(os.environ, FAKE_CT=vmid, **ct.get("env", {}))
    if ct.get("launch_return_delay_s") and "gpuops-launch" in rest:
        # a loaded node: the launch's lxc-attach returns this long after the launch script ended
        import subprocess
        import time

        try:
            done = subprocess.run(rest[1:], env=env, check=False)  # noqa: S603 - argv verbatim, like lxc-attach
        except FileNotFoundError:
            sys.exit(2)
        time.sleep(float(ct["launch_return_delay_s"]))
        sys.exit(done.returncode)
    try:
        os.execvpe(rest[1], rest[1:], env)  # noqa: S606 - argv verbatim, like lxc-attach
    except FileNotFoundError:
        print(f"lxc-attach: {vmid}: attach.c: No such file or directory - Failed to exec \"{rest[1]}\"",
              file=sys.stderr)
        sys.exit(2)


def stat_devices(dev_nodes, args):
    """GNU ``stat [-L] -c FORMAT [--] PATH...`` over the container's /dev, which the stand-in keeps in its state
    (``dev_nodes``: path -> [file type, major, minor]); %n %F %t %T as stat prints them (major, minor in hex)."""
    fmt, paths, rest = "%n", [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-c":
            fmt = rest.pop(0)
        elif arg == "--":
            paths += rest
            break
        elif not arg.startswith("-"):
            paths.append(arg)
    status = 0
    for path in paths:
        node = dev_nodes.get(path)
        if node is None:
            print(f"stat: cannot statx '{path}': No such file or directory", file=sys.stderr)
            status = 1
            continue
        kind, major, minor = node
        print(fmt.replace("%n", path).replace("%F", kind).replace("%t", f"{major:x}").replace("%T", f"{minor:x}"))
    return status


if __name__ == "__main__":
    main(sys.argv[1:])
