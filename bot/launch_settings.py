"""Timings and switches of the launch use case (plain values, set from Settings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchSettings:
    poll_s: float = 2.0
    launch_timeout_s: float = 1800.0
    stall_timeout_s: float = 600.0  # no new log output for this long: a hang
    stop_timeout_s: float = 20.0
    lock_ttl_s: int = 2400
    lease_ttl_s: int = 30
    allow_unknown_flags: bool = False
