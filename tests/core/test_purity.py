"""The core does no I/O: it imports nothing that reaches sockets, processes, files or clocks."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "bot" / "core"
FORBIDDEN = {
    "asyncio", "socket", "subprocess", "os", "time", "asyncssh", "redis", "aiohttp", "slack_sdk",
    "slack_bolt", "pynvml", "requests", "httpx", "shutil", "pathlib", "threading", "signal", "urllib",
    "bot.ssh", "bot.store", "bot.app", "bot.config", "bot.slack", "bot.status", "bot.cli", "bot.lab",
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_modules_import_no_io():
    offenders = {}
    for path in CORE.glob("*.py"):
        bad = {m for m in imported_modules(path) if m in FORBIDDEN or m.split(".")[0] in FORBIDDEN}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_core_reads_no_clock():
    """datetime is allowed for arithmetic on a given time; reading the clock is not."""
    offenders = [p.name for p in CORE.glob("*.py")
                 if any(call in p.read_text() for call in (".now(", ".utcnow(", ".today(", "time.time("))]
    assert offenders == []


def test_core_has_modules():
    assert len(list(CORE.glob("*.py"))) >= 6
