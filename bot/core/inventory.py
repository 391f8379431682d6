"""The inventory: which Proxmox nodes and LXC containers the bot may reach, and how.

Pure data and validation; :mod:`bot.config` reads the file. Targets named in commands are
resolved here, so user text never becomes a host name or a vmid without passing through it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.core.argv import DEFAULT_HF_CACHE
from bot.core.roles import RoleConfig
from bot.errors import TargetError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class Node(BaseModel):
    """A Proxmox VE host reached over SSH."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key: str | None = None  # private key file; None -> ssh-agent is not used, so one must be given
    known_hosts: str
    proc_root: str = "/proc"  # where /proc/<pid>/cgroup is read on the node (tests point it elsewhere)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:\[\]-]{1,253}", value):
            raise ValueError("must be a host name or IP address")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", value):
            raise ValueError("must be a plain POSIX user name")
        return value

    @field_validator("proc_root")
    @classmethod
    def _proc_root(cls, value: str) -> str:
        if not re.fullmatch(r"/[A-Za-z0-9_./-]*", value) or ".." in value:
            raise ValueError("must be an absolute path without '..'")
        return value.rstrip("/") or "/"


class Container(BaseModel):
    """An LXC container on a node, reached with ``pct exec``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str
    vmid: int = Field(ge=100, le=999_999_999)  # Proxmox guest ids start at 100
    python: str = "python3"  # the interpreter of the SGLang environment inside the container
    log_dir: str = "/var/log/gpuops"  # one new log file per attempt is written here
    port: int = Field(30000, ge=1, le=65535)  # default SGLang port of this container
    # where a model given by its Hub id (org/name) is looked for: the container's Hugging Face hub cache
    hf_cache: str = DEFAULT_HF_CACHE

    @field_validator("log_dir", "hf_cache")
    @classmethod
    def _log_dir(cls, value: str) -> str:
        if not re.fullmatch(r"(/[A-Za-z0-9_.+-]+)+", value) or ".." in value:
            raise ValueError("must be an absolute path")
        return value

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        if not re.fullmatch(r"(/[A-Za-z0-9_.+-]+)+|[A-Za-z0-9_.+-]+", value):
            raise ValueError("must be an absolute path or a command name")
        return value


class ScheduledPost(BaseModel):
    """A daily GPU health post: `schedules:` in the inventory file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: str
    at: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    timezone: str = "UTC"
    targets: str = "all"

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class LaunchProfile(BaseModel):
    """A named launch config: `/sglang launch <profile>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    container: str
    model_path: str
    flags: tuple[str, ...] = ()


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: dict[str, Node]
    containers: dict[str, Container] = Field(default_factory=dict)
    roles: RoleConfig = Field(default_factory=RoleConfig)
    profiles: dict[str, LaunchProfile] = Field(default_factory=dict)
    schedules: dict[str, ScheduledPost] = Field(default_factory=dict)

    def node(self, name: str) -> Node:
        """The node ``name``; a record (an attempt in Redis) can name one this inventory no longer has."""
        found = self.nodes.get(name)
        if found is None:
            raise TargetError(f"node `{name}` is not in this inventory")
        return found

    def container_at(self, node: str, vmid: int) -> Container | None:
        return next((c for c in self.containers.values() if c.node == node and c.vmid == vmid), None)

    def container_settings(self, node: str, vmid: int) -> Container:
        """The container's settings (interpreter, log folder, port, Hub cache): as listed, or the defaults for one
        this inventory does not list (addressed as `<node>:<vmid>`, or dropped since an attempt ran there)."""
        return self.container_at(node, vmid) or Container(node=node, vmid=vmid)

    @field_validator("nodes", "containers")
    @classmethod
    def _names(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if not NAME_RE.match(name):
                raise ValueError(f"name {name!r} must be letters, digits, '_', '.', '-'")
        return value

    @model_validator(mode="after")
    def _profiles_name_containers(self) -> Inventory:
        for name, profile in self.profiles.items():
            if profile.container not in self.containers:
                raise ValueError(f"profile {name!r} names container {profile.container!r}, which is not in containers")
        return self

    @model_validator(mode="after")
    def _containers_on_known_nodes(self) -> Inventory:
        for name, ct in self.containers.items():
            if ct.node not in self.nodes:
                raise ValueError(f"container {name!r} is on node {ct.node!r}, which is not in nodes")
        seen: dict[tuple[str, int], str] = {}
        for name, ct in self.containers.items():
            key = (ct.node, ct.vmid)
            if key in seen:
                raise ValueError(f"containers {seen[key]!r} and {name!r} are both {ct.node}:{ct.vmid}")
            seen[key] = name
        return self


@dataclass(frozen=True)
class Target:
    kind: Literal["node", "container", "local"]
    node: str
    vmid: int | None = None
    name: str | None = None  # inventory name of a container

    @property
    def label(self) -> str:
        if self.kind in ("node", "local"):
            return self.node
        base = f"{self.node}:{self.vmid}"
        return f"{base} ({self.name})" if self.name else base

    @property
    def spec(self) -> str:
        """How a command names a container: its inventory name, else node:vmid."""
        return self.name or f"{self.node}:{self.vmid}"


LOCAL = Target("local", "local")


def resolve_targets(spec: str, inventory: Inventory, local: bool = False) -> list[Target]:
    """``all`` | ``<node>`` | ``<node>:<vmid>`` | ``<container name>`` | ``local`` -> targets.

    ``all`` means every node (the host view shows every container's GPU use), plus the
    bot's own GPUs when ``local`` is enabled.
    """
    spec = _as_named(spec.strip(), inventory, local)
    if spec in ("", "all"):
        return [Target("node", n) for n in inventory.nodes] + ([LOCAL] if local else [])
    if spec == "local" and local:
        return [LOCAL]
    if spec in inventory.nodes:
        return [Target("node", spec)]
    if spec in inventory.containers:
        ct = inventory.containers[spec]
        return [Target("container", ct.node, ct.vmid, spec)]
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]*):(\d{3,9})", spec)
    if match and match.group(1) in inventory.nodes and int(match.group(2)) >= 100:
        node, vmid = match.group(1), int(match.group(2))
        name = next((n for n, c in inventory.containers.items() if c.node == node and c.vmid == vmid), None)
        return [Target("container", node, vmid, name)]
    known = ", ".join(sorted([*inventory.nodes, *inventory.containers, *(["local"] if local else [])])) or "(none)"
    low = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]*):(\d{1,9})", spec)
    why = (" (a container's VMID is 100 or more in Proxmox)" if low and low.group(1) in inventory.nodes
           and int(low.group(2)) < 100 else "")
    raise TargetError(f"unknown target `{_shown(spec)}`{why}. Known: {known}, or `all`, or `<node>:<vmid>`")


def _as_named(spec: str, inventory: Inventory, local: bool) -> str:
    """``spec`` spelled as the inventory spells the one node or container it names in another case ("PVE5",
    "Sglang-a6000" typed on a phone, "PVE5:129"): names are matched exactly first, and a case-blind match is taken
    only when it is the one name it could be."""
    node, colon, vmid = spec.partition(":")
    names = [*inventory.nodes, *inventory.containers, "all", *(["local"] if local else [])]
    if node in names:
        return spec
    same = [n for n in names if n.lower() == node.lower()]
    return same[0] + colon + vmid if len(same) == 1 else spec


def resolve_container(spec: str, inventory: Inventory) -> Target:
    """The one container ``spec`` names: its inventory name or ``<node>:<vmid>``. Anything else (a node, ``all``, an
    unknown name) is a TargetError that lists the containers, for the commands that act in one container."""
    try:
        found = resolve_targets(spec, inventory)
    except TargetError:
        found = []
    if len(found) == 1 and found[0].kind == "container":
        return found[0]
    names = ", ".join(sorted(inventory.containers)) or "none named in the inventory"
    ways = f"containers: {names}; or `<node>:<vmid>` on {', '.join(sorted(inventory.nodes)) or 'a node'}"
    if found:
        raise TargetError(f"`{_shown(spec)}` is not one container ({ways})")
    raise TargetError(f"unknown container `{_shown(spec)}` ({ways})")


def _shown(spec: str) -> str:
    spec = spec.strip()
    return spec if len(spec) <= 40 else spec[:40] + "…"
