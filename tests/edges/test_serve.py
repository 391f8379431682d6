"""`gpuops serve` as its own process, stopped as systemd or `docker stop` stops it (SIGTERM)."""

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from bot.lab.nodes import free_port
from tests.conftest import ROOT


def processes(where):
    """PIDs of the live processes for which ``where(status_fields, command_line)`` holds (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = {k: v.strip() for k, v in (line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)}
        if fields.get("State", "").startswith("Z"):
            continue
        if where(fields, cmdline):
            found.append(int(entry.name))
    return found


def redis_children(pid):
    """The redis-server processes whose parent is ``pid``."""
    return processes(lambda fields, _: fields.get("PPid") == str(pid) and fields.get("Name") == "redis-server")


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def healthy(url, timeout_s=60.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with aiohttp.ClientSession() as http:
        while asyncio.get_running_loop().time() < deadline:
            try:
                async with http.get(url) as answer:
                    if answer.status == 200:
                        return True
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    return False


async def test_serve_stops_on_sigterm_and_its_embedded_redis_with_it(lab, tmp_path):
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "GPUOPS_INVENTORY": str(lab.workdir / "inventory.yml"), "GPUOPS_DATA_DIR": str(tmp_path / "data"),
           "GPUOPS_HTTP_PORT": str(port), "GPUOPS_SLACK_BOT_TOKEN": "xoxb-lab",
           "GPUOPS_SLACK_SIGNING_SECRET": lab.signing_secret, "GPUOPS_SLACK_API_URL": lab.standin.base_url}
    bot = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    redis = []
    try:
        assert await healthy(f"http://127.0.0.1:{port}/healthz"), "the bot did not come up"
        redis = redis_children(bot.pid)
        assert len(redis) == 1  # its embedded Redis (no REDIS_URL)
        bot.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(bot.communicate, timeout=60)
        assert bot.returncode == 0, output
        assert "gpuops: stopping" in output
        assert not alive(redis[0])  # stopped with the bot, not left running on its data dir
        assert (tmp_path / "data" / "redis" / "redis-version").exists()
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.wait(10)
        for pid in redis:  # the redis-server this test's bot started, if the bot left it behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
