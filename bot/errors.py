"""One error tree for the whole bot.

    GpuopsError                 user_message: safe to post in Slack (no secrets, no tracebacks)
    ├─ UsageError               the command text is wrong -> usage reply
    ├─ ConfigError              settings or inventory file invalid (file, key, what)
    ├─ TargetError              host/container not in the inventory
    ├─ RemoteError              something went wrong on or on the way to a node
    │  ├─ ConnectError          TCP/SSH connection or authentication failed
    │  ├─ HostKeyError          host key unknown or changed: refused
    │  ├─ CommandFailed         non-zero exit (argv, exit_status, stderr_tail)
    │  │  └─ ContainerDown      `pct exec` refused: the container is stopped or missing
    │  └─ RemoteTimeout         no answer within the deadline
    ├─ ParseError               output not in the expected shape; keeps the raw text
    └─ StoreError               Redis unavailable or refused
"""

from __future__ import annotations


class GpuopsError(Exception):
    def __init__(self, user_message: str) -> None:
        super().__init__(user_message)
        self.user_message = user_message

    @property
    def last_word(self) -> str:
        """The failure in one line, where one is wanted (a failed command narrows it to its own last line)."""
        return self.user_message


class UsageError(GpuopsError):
    pass


class ConfigError(GpuopsError):
    pass


class TargetError(GpuopsError):
    pass


class RemoteError(GpuopsError):
    def __init__(self, user_message: str, node: str) -> None:
        super().__init__(user_message)
        self.node = node


class ConnectError(RemoteError):
    pass


class HostKeyError(RemoteError):
    pass


class CommandFailed(RemoteError):
    def __init__(
        self, node: str, argv: tuple[str, ...], exit_status: int | None, stderr: str, stdout: str = ""
    ) -> None:
        tail = "\n".join(stderr.strip().splitlines()[-5:])
        super().__init__(f"`{argv[0]}` on {node} exited with {exit_status}: {tail or '(no stderr)'}", node)
        self.argv = argv
        self.exit_status = exit_status
        self.stderr_tail = tail
        self.stdout = stdout

    @property
    def last_word(self) -> str:
        """The failure in one line: the command's last stderr line (a login shell's start-up noise on the node,
        e.g. a `.bashrc` that runs `pyenv init`, comes before it)."""
        lines = self.stderr_tail.splitlines()
        return f"`{self.argv[0]}` on {self.node} exited with {self.exit_status}: " + \
            (lines[-1].strip() if lines else "(no stderr)")


class RemoteTimeout(RemoteError):
    def __init__(self, node: str, seconds: float, what: str = "command") -> None:
        super().__init__(f"{node}: no answer to {what} within {seconds:g}s", node)
        self.seconds = seconds


class ContainerDown(CommandFailed):
    """``pct exec`` refused because the container is not running or the node has none by that id: ``user_message``
    says so in words that mean it, where a bare CommandFailed quotes pct's exit."""

    def __init__(self, node: str, argv: tuple[str, ...], exit_status: int | None, stderr: str, meaning: str,
                 stopped: bool) -> None:
        super().__init__(node, argv, exit_status, stderr)
        self.user_message = meaning
        self.args = (meaning,)
        self.stopped = stopped  # not running; else the node has no such container

    @property
    def last_word(self) -> str:
        return self.user_message


class ParseError(GpuopsError):
    def __init__(self, user_message: str, raw: str, kind: str = "unrecognised") -> None:
        super().__init__(user_message)
        self.raw = raw
        self.kind = kind


class StoreError(GpuopsError):
    pass
