"""Who may do what: viewer < operator < admin, from Slack user IDs, user groups and channels.

Viewers read (status, budget, history, triage, an attempt's log); operators change things (launch, stop, free);
admins may also force a launch over a failed pre-flight. Nothing here touches Slack: the
caller passes the user's groups in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from pydantic import BaseModel, ConfigDict, Field


class Role(IntEnum):
    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3


ACTION_ROLE: dict[str, Role] = {
    "gpu.status": Role.VIEWER,
    "sglang.budget": Role.VIEWER,
    "sglang.history": Role.VIEWER,
    "sglang.triage": Role.VIEWER,
    "sglang.log": Role.VIEWER,
    "sglang.launch": Role.OPERATOR,
    "sglang.stop": Role.OPERATOR,
    "gpu.free": Role.OPERATOR,
    "sglang.launch.force": Role.ADMIN,
}


class RoleConfig(BaseModel):
    """``roles:`` in the inventory file. Entries are user IDs (U...), user groups (S...) or ``*``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    admins: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    viewers: tuple[str, ...] = ("*",)
    # per channel: the highest role anyone may act with there (e.g. a read-only announcements channel)
    channel_caps: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    role: Role
    needed: Role
    reason: str = field(default="")


def role_of(user: str, groups: tuple[str, ...], config: RoleConfig) -> Role:
    ids = {user, *groups, "*"}
    if ids & set(config.admins):
        return Role.ADMIN
    if ids & set(config.operators):
        return Role.OPERATOR
    if ids & set(config.viewers):
        return Role.VIEWER
    return Role.NONE


def decide(action: str, user: str, groups: tuple[str, ...], channel: str, config: RoleConfig) -> Decision:
    needed = ACTION_ROLE[action]
    role = role_of(user, groups, config)
    cap = config.channel_caps.get(channel)
    if cap is not None:
        role = min(role, Role[cap.upper()])
    if role >= needed:
        return Decision(True, role, needed)
    where = f" in this channel (capped at {cap})" if cap is not None else ""
    return Decision(False, role, needed,
                    f"`{action}` needs the {needed.name.lower()} role; you have {role.name.lower()}{where}")
