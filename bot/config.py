"""Settings from the environment (``GPUOPS_*``, Slack's usual variable names accepted) and
the inventory file. A bad inventory fails at start with the file, the key and what is wrong."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.core.inventory import Inventory
from bot.core.status import Thresholds
from bot.errors import ConfigError
from bot.launch_settings import LaunchSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_", env_file=None, extra="ignore", populate_by_name=True)

    slack_bot_token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GPUOPS_SLACK_BOT_TOKEN", "SLACK_BOT_TOKEN"))
    slack_signing_secret: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GPUOPS_SLACK_SIGNING_SECRET", "SLACK_SIGNING_SECRET"))
    slack_app_token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GPUOPS_SLACK_APP_TOKEN", "SLACK_APP_TOKEN"))
    slack_api_url: str = "https://slack.com/api/"

    inventory: Path = Path("inventory.yml")
    redis_url: str | None = Field(None, validation_alias=AliasChoices("GPUOPS_REDIS_URL", "REDIS_URL"))
    data_dir: Path = Path(".gpuops")

    http_host: str = "127.0.0.1"
    http_port: int = 3000

    ssh_connect_timeout_s: float = 6.0
    ssh_command_timeout_s: int = 20
    ssh_keepalive_s: float = 15.0
    ssh_max_channels: int = Field(8, ge=1, le=9)  # OpenSSH MaxSessions is 10 per connection
    status_deadline_s: float = 12.0

    progress_poll_s: float = 2.0
    progress_update_s: float = 3.0  # chat.update is Tier 3: at most one edit per attempt this often
    launch_timeout_s: float = 1800.0
    stall_timeout_s: float = 600.0
    stop_timeout_s: float = 20.0
    confirm_ttl_s: int = 300
    sample_interval_s: int = 300  # GPU samples for the daily health posts (8 days kept in Redis)
    allow_unknown_flags: bool = False
    local_gpus: bool = False  # the bot runs on a GPU machine: `local` target read through NVML
    orphaned_memory_mib: int = 256
    hot_c: int = 85
    # a ready server whose 8-token health-probe generation takes longer than this on two samples in a row
    # is announced in its launch thread (an idle healthy server answers in well under a second)
    slow_answer_s: float = Field(10.0, gt=0)

    def thresholds(self) -> Thresholds:
        return Thresholds(orphaned_memory_mib=self.orphaned_memory_mib, hot_c=self.hot_c)

    def launch_settings(self) -> LaunchSettings:
        return LaunchSettings(poll_s=self.progress_poll_s, launch_timeout_s=self.launch_timeout_s,
                              stall_timeout_s=self.stall_timeout_s, stop_timeout_s=self.stop_timeout_s,
                              allow_unknown_flags=self.allow_unknown_flags)


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_inventory(data: object, source: str) -> Inventory:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with `nodes:` (and `containers:`), got {type(data).__name__}")
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None


def load_inventory(path: Path) -> Inventory:
    try:
        text = path.read_text()
    except OSError as exc:
        hint = (" (give --inventory or GPUOPS_INVENTORY; inventory.example.yml shows the format, and `./dev lab` "
                "runs an embedded lab without one)") if isinstance(exc, FileNotFoundError) else ""
        raise ConfigError(f"{path}: cannot read inventory: {exc.strerror}{hint}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} not valid YAML: {getattr(exc, 'problem', exc)}") from None
    inventory = parse_inventory(data, str(path))
    base = path.parent
    for name, node in inventory.nodes.items():
        for key in ("known_hosts", "key"):
            value = getattr(node, key)
            if value is None:
                if key == "key":
                    raise ConfigError(f"{path}: nodes.{name}.key: a private key file is required")
                continue
            resolved = (base / Path(value).expanduser())
            if not resolved.is_file():
                raise ConfigError(f"{path}: nodes.{name}.{key}: file {resolved} does not exist")
    return inventory
