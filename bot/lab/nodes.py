"""The embedded lab: local SSH servers that act as Proxmox nodes.

A lab node is a real SSH server on 127.0.0.1 whose PATH holds the fake ``pct`` and
``nvidia-smi``: OpenSSH ``sshd`` when it is installed (what production runs, with its
session limits), else asyncssh's server running each command through ``bash -c`` (no root
or system package needed). Either way the bot's real SSH client, host-key check and quoting
are exercised. Scenario state lives in a directory per node (``node.json``, ``calls.log``,
``proc/<pid>/cgroup``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from bot.core.smi import parse_table
from bot.lab.fake_sglang import link_stat

LAB_DIR = Path(__file__).resolve().parent
SEED_TABLE = LAB_DIR / "data" / "gls-550.127.05-rtx_a6000_x9.txt"


# SGLang variables the lab's SGLang knows: the ones gpuops models or advises
LAB_SGLANG_ENV = ("SGLANG_MAMBA_CONV_DTYPE", "SGLANG_MAMBA_SSM_DTYPE", "SGLANG_ENABLE_SPEC_V2",
                  "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")


def seed_node_state(name: str = "pve5", vmid: int = 129) -> dict[str, Any]:
    """Two RTX A6000 passed to one container, built from the real A6000 output (see data/SOURCE.md)."""
    table = parse_table(SEED_TABLE.read_text())
    gpus = []
    for gpu in table.gpus[:2]:
        gpus.append({
            "index": gpu.index,
            "uuid": f"GPU-5eed0a60-0000-4000-8000-00000000000{gpu.index}",
            "name": gpu.name,
            "pci_bus_id": gpu.pci_bus_id,
            "memory_used_mib": gpu.memory_used_mib,
            "memory_total_mib": 49140,
            "utilization_pct": gpu.utilization_pct,
            "temperature_c": gpu.temperature_c,
            "power_draw_w": gpu.power_draw_w,
            "power_limit_w": gpu.power_limit_w,
            "fan_pct": gpu.fan_pct,
            "perf_state": gpu.perf_state,
            "compute_mode": gpu.compute_mode,
            "ecc_mode": "Disabled", "ecc_mode_pending": "Disabled",  # 49140 MiB is the A6000's ECC-off size
        })
    return {
        "name": name,
        "driver_version": "580.126.09",
        "cuda_version": "13.0",
        "gpus": gpus,
        "processes": [],
        "containers": {str(vmid): {"status": "running", "name": "sglang-a6000", "gpus": [g["index"] for g in gpus],
                                   "sglang_version": "0.5.9", "transformers_version": "4.57.1",
                                   "models": ["Qwen3.6-27B"],
                                   # the device nodes its config passes in, as Proxmox 8.1+ `devN:` entries
                                   "devices": [*(f"/dev/nvidia{g['index']}" for g in gpus), "/dev/nvidiactl",
                                               "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"],
                                   "dev_nodes": _device_nodes(gpu.index for gpu in table.gpus[:2])}},
    }


def _device_nodes(gpu_indexes: Iterable[int]) -> dict[str, list[Any]]:
    """The container's /dev/nvidia* as stat sees them: the numbers of public `ls -l /dev/nvidia*` listings (the
    GPUs and nvidiactl are the driver's fixed major 195; nvidia-uvm's major is given at module load, 511 there)."""
    char = "character special file"
    nodes: dict[str, list[Any]] = {f"/dev/nvidia{i}": [char, 195, i] for i in gpu_indexes}
    nodes.update({"/dev/nvidiactl": [char, 195, 255], "/dev/nvidia-uvm": [char, 511, 0],
                  "/dev/nvidia-uvm-tools": [char, 511, 1]})
    return nodes


def provision_containers(state_dir: Path, state: dict[str, Any]) -> None:
    """Give each lab container a filesystem: its models' config.json and an installed `sglang`
    distribution of the scenario's version (found by importlib.metadata through PYTHONPATH,
    which the fake pct sets as that container's environment)."""
    for vmid, ct in state.get("containers", {}).items():
        root = state_dir / "ct" / vmid
        site = root / "site"
        version = ct.get("sglang_version")
        if version:
            (site / "sglang").mkdir(parents=True, exist_ok=True)
            (site / "sglang" / "__init__.py").write_text(f'__version__ = "{version}"\n')
            (site / "sglang" / "launch_server.py").write_text(
                "import sys\nfrom bot.lab.fake_sglang import main\nsys.exit(main(sys.argv[1:]))\n")
            (site / "sglang" / "srt").mkdir(exist_ok=True)
            (site / "sglang" / "srt" / "__init__.py").write_text("")
            (site / "sglang" / "srt" / "server_args.py").write_text(
                "from bot.lab.fake_server_args import ServerArgs\n\n__all__ = ['ServerArgs']\n")
            # the variables the stand-in's SGLang knows, named as SGLang's sglang/srt/environ.py names them
            (site / "sglang" / "srt" / "environ.py").write_text(f"KNOWN = {LAB_SGLANG_ENV!r}\n")
            info = site / f"sglang-{version}.dist-info"
            info.mkdir(exist_ok=True)
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
            if ct.get("transformers_version"):
                tf = site / f"transformers-{ct['transformers_version']}.dist-info"
                tf.mkdir(exist_ok=True)
                (tf / "METADATA").write_text(
                    f"Metadata-Version: 2.1\nName: transformers\nVersion: {ct['transformers_version']}\n")
            scenario = root / "scenario.json"
            scenario.write_text(json.dumps({"queue": [], "delay_s": 0.05}))
            ct["env"] = {"PYTHONPATH": str(site), "GPUOPS_LAB_SCENARIO": str(scenario),
                         "GPUOPS_LAB_SGLANG_VERSION": version, "HF_HUB_CACHE": str(root / "hf-cache")}
            (root / "logs").mkdir(parents=True, exist_ok=True)
        for model in ct.get("models", []):
            target = root / "models" / model
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(LAB_DIR / "data" / "models" / model / "config.json", target / "config.json")
        ct["root"] = str(root)


def container_path(node: LabNode, vmid: int, *parts: str) -> str:
    """Where a path inside a lab container lives (the lab's containers share the node's filesystem)."""
    return str(node.state_dir.joinpath("ct", str(vmid), *parts))


@dataclass
class LabNode:
    name: str
    host: str
    port: int
    user: str
    state_dir: Path
    key_path: Path
    known_hosts_path: Path
    kind: str  # "openssh" | "asyncssh"
    _process: subprocess.Popen[bytes] | None = None
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _server: asyncssh.SSHAcceptor | None = None
    _extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    # scenario -----------------------------------------------------------------
    def read_state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads((self.state_dir / "node.json").read_text())
        return state

    def write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_dir / "node.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_dir / "node.json")

    def add_process(self, pid: int, gpu_index: int, name: str, used_mib: int, vmid: int | None,
                    while_running: bool = False) -> None:
        """Show a GPU process in the node's nvidia-smi (status tests only: ``pid`` may not be ours,
        so nothing may stop it; use :meth:`spawn_holder` for a process that can be stopped). With
        ``while_running`` it is listed only while that PID runs, as the real tool lists a process only while it
        lives."""
        state = self.read_state()
        uuid = next(g["uuid"] for g in state["gpus"] if g["index"] == gpu_index)
        entry = {"pid": pid, "gpu_uuid": uuid, "name": name, "used_mib": used_mib}
        state["processes"].append({**entry, "while_running": True} if while_running else entry)
        self.write_state(state)
        cgroup = self.state_dir / "proc" / str(pid) / "cgroup"
        cgroup.parent.mkdir(parents=True, exist_ok=True)
        owner = f"0::/lxc/{vmid}/ns/user.slice/user-0.slice/session-c1.scope" if vmid else "0::/user.slice"
        cgroup.write_text(owner + "\n")

    def spawn_holder(self, gpu_index: int, name: str, used_mib: int, vmid: int | None) -> int:
        """A real process of the lab's own (so that stopping it by PID is safe) holding GPU memory."""
        process = subprocess.Popen(["sleep", "86400"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        self._children.append(process)
        # reaped the moment it ends, as a container's init reaps its processes: a stopped holder leaves no zombie
        # for the bot's `kill -0` to find alive, and the node's nvidia-smi stops listing it (see fake_nvidia_smi)
        threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
        self.add_process(process.pid, gpu_index, name, used_mib, vmid, while_running=True)
        link_stat(self.state_dir / "proc" / str(process.pid), process.pid)
        return process.pid

    def spawn_device_holder(self, name: str, vmid: int | None, devices: Iterable[str] = ("/dev/nvidia0",),
                            keeps_orphaned_mib: dict[int, int] | None = None, cuda: bool = True) -> int:
        """A real process of the lab's own, named ``name`` (its command name, as the kernel keeps it), that holds
        the GPU device nodes ``devices`` open in the node's /proc while nvidia-smi lists no memory for it: a killed
        server's child that inherited them. With ``cuda`` it holds nvidiactl and nvidia-uvm too, as a CUDA process
        does (without: a monitor reading the GPUs through NVML). ``keeps_orphaned_mib`` ({GPU index: MiB}): memory
        held with no process listed on those GPUs for as long as it runs, as the memory its dead parent left stays
        held while it lives."""
        devices = (*devices, *(("/dev/nvidiactl", "/dev/nvidia-uvm") if cuda else ("/dev/nvidiactl",)))
        named = self.state_dir / "bin-named" / name
        named.parent.mkdir(exist_ok=True)
        if not named.exists():
            shutil.copy(shutil.which("sleep") or "/bin/sleep", named)  # its command name is its file's name
        process = subprocess.Popen([str(named), "86400"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        self._children.append(process)
        threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
        proc = self.state_dir / "proc" / str(process.pid)
        (proc / "fd").mkdir(parents=True, exist_ok=True)
        owner = f"0::/lxc/{vmid}/ns/user.slice/user-0.slice/session-c1.scope" if vmid else "0::/system.slice"
        (proc / "cgroup").write_text(owner + "\n")
        link_stat(proc, process.pid)
        for fd, device in enumerate(devices, start=3):
            (proc / "fd" / str(fd)).symlink_to(device)
        if keeps_orphaned_mib:
            state = self.read_state()
            for gpu in state["gpus"]:
                if gpu["index"] in keeps_orphaned_mib:
                    gpu["orphaned_mib"], gpu["orphaned_while_pid"] = keeps_orphaned_mib[gpu["index"]], process.pid
            self.write_state(state)
        return process.pid

    def kill_listed_holders(self) -> None:
        """SIGKILL every process of the lab's own that the node's nvidia-smi lists (a `pkill -9` of a server), by
        PID, and list none any more."""
        state = self.read_state()
        listed = {p["pid"] for p in state["processes"]}
        for process in self._children:
            if process.pid in listed:
                process.kill()
                process.wait()
        state["processes"] = []
        self.write_state(state)

    def fail_next(self, program: str, times: int = 1) -> None:
        """The next ``times`` ``pct exec`` on this node that run ``program`` fail (exit 255): a transient failure."""
        (self.state_dir / "fail_next.json").write_text(json.dumps({"program": program, "times": times}))

    def set_scenario(self, vmid: int, queue: list[str], delay_s: float = 0.05, pause_s: float | None = None) -> None:
        """The outcomes the container's SGLang stand-in plays for its next launches (``pause_s``: how long each is
        silent after weight loading began; by default a ``slow_load`` 3 s, the others not at all)."""
        path = self.state_dir / "ct" / str(vmid) / "scenario.json"
        pause = {} if pause_s is None else {"pause_s": pause_s}
        path.write_text(json.dumps({"queue": queue, "delay_s": delay_s, **pause}))

    def calls(self) -> list[list[str]]:
        path = self.state_dir / "calls.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def inventory_entry(self) -> dict[str, Any]:
        return {
            "host": self.host, "port": self.port, "user": self.user, "key": str(self.key_path),
            "known_hosts": str(self.known_hosts_path), "proc_root": str(self.state_dir / "proc"),
        }

    # lifecycle ----------------------------------------------------------------
    async def stop(self) -> None:
        for child in self._children:
            if child.poll() is None:
                child.kill()
                child.wait()
        self._children.clear()
        await self._stop_launched()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self._process.wait, 5)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._process = None


    def launched_pids(self) -> list[int]:
        """PIDs of the SGLang stand-ins this node's containers started: found by the node's own
        state directory in their environment, so nothing else on the machine is ever matched."""
        marker = f"FAKE_PVE_STATE={self.state_dir}\0".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if b"sglang.launch_server" in (entry / "cmdline").read_bytes() and \
                        marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    async def _stop_launched(self) -> None:
        pids = self.launched_pids()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists()]
            await asyncio.sleep(0.05)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _install_fakes(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, module in (("nvidia-smi", "fake_nvidia_smi.py"), ("pct", "fake_pct.py"),
                         ("journalctl", "fake_kernel_log.py"), ("dmesg", "fake_kernel_log.py")):
        target = bin_dir / name
        target.write_text(f"#!{sys.executable}\n" + (LAB_DIR / module).read_text())
        target.chmod(0o755)


def _keys(workdir: Path) -> tuple[asyncssh.SSHKey, Path, asyncssh.SSHKey, Path]:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    host_key_path = workdir / "ssh_host_ed25519_key"
    host_key.write_private_key(str(host_key_path))
    host_key_path.chmod(0o600)
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key_path = workdir / "client_ed25519"
    client_key.write_private_key(str(client_key_path))
    client_key_path.chmod(0o600)
    (workdir / "authorized_keys").write_bytes(client_key.export_public_key())
    return host_key, host_key_path, client_key, client_key_path


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def sshd_path() -> str | None:
    candidates = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
    return shutil.which("sshd") or next((p for p in candidates if os.path.exists(p)), None)


async def start_node(
    workdir: Path,
    name: str = "pve5",
    state: dict[str, Any] | None = None,
    prefer: str = "openssh",
    host: str = "127.0.0.1",
) -> LabNode:
    """Start a lab node; ``prefer="openssh"`` falls back to asyncssh when no sshd exists."""
    workdir.mkdir(parents=True, exist_ok=True)
    state_dir = workdir / "state"
    (state_dir / "proc").mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # the node's uptime is this machine's, as its processes' stat are
        (state_dir / "proc" / "uptime").symlink_to("/proc/uptime")
    bin_dir = workdir / "bin"
    _install_fakes(bin_dir)
    state = state or seed_node_state(name)
    provision_containers(state_dir, state)
    (state_dir / "node.json").write_text(json.dumps(state, indent=1))
    host_key, host_key_path, _client_key, client_key_path = _keys(workdir)
    port = free_port(host)
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(f"[{host}]:{port} " + host_key.export_public_key().decode())
    env_path = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    node = LabNode(name, host, port, _current_user(), state_dir, client_key_path, known_hosts,
                   "openssh" if prefer == "openssh" and sshd_path() else "asyncssh")
    if node.kind == "openssh":
        node._process = await _start_openssh(workdir, host, port, host_key_path, env_path, state_dir)
    else:
        node._server = await _start_asyncssh(workdir, host, port, host_key, env_path, state_dir)
    return node


async def _start_openssh(
    workdir: Path, host: str, port: int, host_key_path: Path, env_path: str, state_dir: Path
) -> subprocess.Popen[bytes]:
    if os.getuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    config = workdir / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}",
        f"ListenAddress {host}",
        f"HostKey {host_key_path}",
        f"PidFile {workdir / 'sshd.pid'}",
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PrintMotd no",
        f"SetEnv PATH={env_path} FAKE_PVE_STATE={state_dir}",
        "LogLevel ERROR",
        "",
    ]))
    log = open(workdir / "sshd.log", "ab")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen([str(sshd_path()), "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}: {(workdir / 'sshd.log').read_text()[-500:]}")
        try:
            reader, writer = await asyncio.open_connection(host, port)
            banner = await asyncio.wait_for(reader.readline(), 2)
            writer.close()
            if banner.startswith(b"SSH-2.0-"):
                return process
        except OSError:
            await asyncio.sleep(0.02)
    process.kill()
    raise RuntimeError("sshd did not answer within 10 s")


async def _start_asyncssh(
    workdir: Path, host: str, port: int, host_key: asyncssh.SSHKey, env_path: str, state_dir: Path
) -> asyncssh.SSHAcceptor:
    env = {"PATH": env_path, "FAKE_PVE_STATE": str(state_dir), "HOME": str(workdir), "LANG": "C.UTF-8"}

    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or "true"
        child = await asyncio.create_subprocess_exec(
            "bash", "-c", command, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        out, err = await child.communicate()
        process.stdout.write(out)
        process.stderr.write(err)
        process.exit(child.returncode if child.returncode is not None and child.returncode >= 0 else 255)

    return await asyncssh.listen(
        host, port, server_host_keys=[host_key], authorized_client_keys=str(workdir / "authorized_keys"),
        process_factory=handle, encoding=None, allow_scp=False,
    )
