"""Shared test set-up. Service fixtures (Redis, SSH nodes, the Slack stand-in) live in
tests/services.py and are registered here as a plugin."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "bench"))

pytest_plugins = ["tests.services"]
