"""A log as SGLang wrote it, from a log as it was collected.

A log that reaches triage through a collector carries the collector's words before SGLang's on each line: `docker
compose logs` names the service (``sglang-1  | ``), `docker logs -t` and `kubectl logs --timestamps` put an RFC 3339
time first, containerd's files add ``stdout F``, `journalctl` and rsyslog's /var/log/syslog put the time, the host
and the unit's process first, docker's json-file driver wraps each line in a JSON object, Ray and vLLM tag their
workers' output ``(Worker pid=N, ip=...)``, and a wrapper program logging SGLang's output through Python's logging
puts its own time, logger and level first. Colour codes come along when a terminal was recorded. The triage's rules
read SGLang's words (a traceback frame starts its line), so these prefixes are taken off first, and a line containerd
or docker cut into pieces (``P``; no newline) is joined again; line numbers stay those of the file.

A prefix form is taken off only when it is how this log was collected: when it starts at least a third of the
log's non-blank lines. A line of SGLang's own that happens to look like one prefix is left alone. An indentation
that every line shares comes off too: it is how the log was pasted (SGLang starts its own lines at the margin, and a
traceback's frames are told by their indentation).

A log copied out of a terminal may have its long lines cut at the terminal's width; ``unwrapped`` puts them back
together. The last lines of a launch's own log, as ``/sglang log`` shows them, are read here too
(``parse_log_tail``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from bot.core.flags import scrub_secrets

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})"
_SYSLOG_TIME = r"[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d+)?"
_JOURNAL_ISO_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?[+-]\d{4}"  # short-iso: +0100, never Z
_UNIT = r"[\w.@/-]+(?:\[\d+\])?"

# (what wrote it, the prefix it puts before each line); the form on the most lines is taken off first, then the
# search runs again for one nested inside it (compose's service name before docker's timestamp; the same form again, as
# when a containerd file is itself collected by containerd)
COLLECTOR_PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("containerd", re.compile(rf"^{_RFC3339} (?:stdout|stderr) [FP] ")),
    # journalctl's forms, and rsyslog's file format (/var/log/syslog: an RFC 3339 time, as on Ubuntu 24.04); where
    # docker's timestamp form matches as many lines, this longer form is listed first and so taken
    ("journalctl", re.compile(rf"^(?:{_SYSLOG_TIME}|{_JOURNAL_ISO_TIME}|{_RFC3339}) \S+ {_UNIT}: ")),
    ("docker/kubectl timestamps", re.compile(rf"^{_RFC3339} ")),
    ("docker compose", re.compile(r"^[A-Za-z0-9][\w.-]*\s*\| ")),
    ("kubectl --prefix", re.compile(r"^\[pod/[^\]\s]+\] ")),
    ("worker tag", re.compile(r"^\(\w+ pid=\d+(?:, ip=[\d.:a-fA-F]+)?\) ")),
    ("python logging", re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - [\w.]+ - [A-Z]+ - ")),
)
_SHARE = 3  # a form is the log's when it starts at least 1 in _SHARE non-blank lines
_NESTING = 3  # at most this many prefixes, one inside another


def collected_lines(text: str) -> list[str]:
    """The lines of a log as it was handed over. A docker json-file log (the file under /var/lib/docker/containers,
    one ``{"log": ..., "stream": ..., "time": ...}`` object per line) becomes what `docker logs -t` prints of it:
    the time, then the line. A line the collector split into pieces (docker's json-file and containerd cut a line
    longer than 16 KiB) is joined again on the line its first piece is on; the pieces after it leave empty lines, so
    line numbers stay those of the file."""
    lines = text.replace("\r\n", "\n").split("\n")
    content = sum(1 for line in lines if line.strip())
    decoded = [_docker_json_piece(line) for line in lines]
    found = [piece for piece in decoded if piece is not None]
    if found and len(found) * _SHARE >= content:
        return _joined(lines, decoded)
    pieces = [_cri_piece(line) for line in lines]
    if sum(1 for piece in pieces if piece is not None) * _SHARE >= content:
        return _joined(lines, pieces)
    return lines


@dataclass(frozen=True)
class _Piece:
    """One line of a collector that marks the lines it cut into pieces."""

    stream: str
    shown: str  # the line as shown when it starts a line (with the collector's time)
    text: str  # its text alone, when it continues one
    ends: bool  # the line ends with this piece
    time: str | None  # the collector's time (RFC 3339), read only when a line is to be joined


# containerd's (CRI) log line: time, stream, F for a whole line or its last piece, P for a piece more follows
_CRI_PIECE = re.compile(rf"^(?P<time>{_RFC3339}) (?P<stream>stdout|stderr) (?P<tag>[FP]) ")


def _cri_piece(line: str) -> _Piece | None:
    m = _CRI_PIECE.match(line)
    return None if m is None else _Piece(m.group("stream"), line, line[m.end():], m.group("tag") == "F",
                                         m.group("time"))


def _docker_json_piece(line: str) -> _Piece | None:
    """One json-file object: docker leaves the newline off every piece of a split line but its last."""
    if not line.startswith("{") or '"log"' not in line:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(text := entry.get("log"), str):
        return None
    time = entry.get("time")
    bare = text.removesuffix("\n")
    if isinstance(time, str) and re.fullmatch(_RFC3339, time):
        return _Piece(str(entry.get("stream")), f"{time} {bare}", bare, text.endswith("\n"), time)
    return _Piece(str(entry.get("stream")), bare, bare, text.endswith("\n"), None)


def _time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _joined(lines: list[str], pieces: list[_Piece | None]) -> list[str]:
    """``lines`` as shown, each piece that does not end its line continued by the next pieces of its stream, in
    time order (a newest-first export, by the collector's times, is joined from its end); the line is kept where its
    first piece is. Only where some pieces end their line, as a collector that splits marks them: an export that
    dropped every line's newline is not one long line."""
    out = [line if piece is None else piece.shown for line, piece in zip(lines, pieces, strict=True)]
    ends = [piece.ends for piece in pieces if piece is not None]
    if all(ends) or not any(ends):
        return out
    times = [t for piece in pieces if piece is not None and piece.time is not None and (t := _time(piece.time))]
    steps = [(a < b) - (a > b) for a, b in pairwise(times)]
    order = range(len(pieces) - 1, -1, -1) if steps.count(-1) > steps.count(1) else range(len(pieces))
    open_at: dict[str, int] = {}  # stream -> the index of the line it is building
    for index in order:
        piece = pieces[index]
        if piece is None:
            continue
        if piece.stream in open_at:
            out[open_at[piece.stream]] += piece.text
            out[index] = ""
            if piece.ends:
                del open_at[piece.stream]
        elif not piece.ends:
            open_at[piece.stream] = index
    return out


# a colour code whose ESC byte a copy lost (a paste into GitHub or a chat keeps `[31mERROR[0m` as text)
_ORPHAN_SGR = re.compile(r"\[(?:\d{1,3}(?:;\d{1,3})*)?m")


def strip_ansi(line: str) -> str:
    """The line without terminal colour codes: whole ones, and on a line that carries an orphaned reset (``[0m``),
    the codes a copy left without their ESC byte."""
    line = ANSI_ESCAPE.sub("", line)
    return _ORPHAN_SGR.sub("", line) if "[0m" in line else line


def collector_forms(lines: list[str]) -> list[str]:
    """The collector prefixes this log carries, outermost first (names from COLLECTOR_PREFIXES)."""
    return [name for name, _ in _forms(lines)]


def _forms(lines: list[str]) -> list[tuple[str, re.Pattern[str]]]:
    found: list[tuple[str, re.Pattern[str]]] = []
    current = [line for line in lines if line.strip()]
    for _ in range(_NESTING):
        if not current:
            break
        hits, name, pattern = max(((sum(1 for line in current if pattern.match(line)), name, pattern)
                                    for name, pattern in COLLECTOR_PREFIXES),
                                   key=lambda form: form[0], default=(0, "", None))
        if pattern is None or not hits or hits * _SHARE < len(current):
            break
        found.append((name, pattern))
        current = [pattern.sub("", line, count=1) for line in current]
    return found


def plain_lines(lines: list[str]) -> list[str]:
    """Each line as SGLang wrote it: colour codes, a trailing CR and the collector's prefixes taken off, and an
    indentation every line shares (a log pasted as an indented block: SGLang starts its own lines at the margin)."""
    bare = [strip_ansi(line.rstrip("\r")) for line in lines]
    if margin := _shared_indent(bare):  # the paste's, outside any collector's prefix
        bare = [line[margin:] for line in bare]
    for _, pattern in _forms(bare):
        bare = [pattern.sub("", line, count=1) for line in bare]
    return bare


_FRAME_LINE = re.compile(r'File "[^"]*", line \d+')


def _shared_indent(lines: list[str]) -> int:
    """How many leading whitespace characters every non-blank line starts with, all the same ones; none when the
    lines at that margin are all traceback frames (an excerpt that begins inside a traceback is indented by itself)."""
    written = [line for line in lines if line.strip()]
    if not written:
        return 0
    first = written[0]
    width = len(first) - len(first.lstrip())
    for line in written[1:]:
        width = min(width, len(line) - len(line.lstrip()))
        while width and line[:width] != first[:width]:
            width -= 1
        if not width:
            return 0
    at_margin = [line[width:] for line in written if not line[width:width + 1].isspace()]
    return 0 if all(_FRAME_LINE.match(line) for line in at_margin) else width


TERMINAL_MIN_COLUMNS = 60  # narrower than any terminal a log is read in


def unwrapped(lines: list[str]) -> tuple[list[str], list[int], int] | None:
    """A log copied from a terminal that hard-wrapped its long lines at its width, with each long line rejoined:
    a line exactly as long as the longest (the width, at least TERMINAL_MIN_COLUMNS) is a piece the terminal cut,
    continued on the next line. Returns the rejoined lines, the index of the line each starts on, and the width;
    None when no line was rejoined. A real line that happens to be exactly the width is joined to the next too,
    so this reading is tried only when the log as given names no cause (``diagnosis.diagnose``)."""
    widths = [len(strip_ansi(line)) for line in lines]
    width = max(widths, default=0)
    if width < TERMINAL_MIN_COLUMNS:
        return None
    joined: list[str] = []
    starts: list[int] = []
    for index, line in enumerate(lines):
        if index and widths[index - 1] == width and line.strip():
            joined[-1] += line
        else:
            joined.append(line)
            starts.append(index)
    return (joined, starts, width) if len(joined) < len(lines) else None


SHOWN_LINE_CHARS = 500  # a longer line is cut when shown (a traceback's locals, a dumped tensor)


@dataclass(frozen=True)
class LogTail:
    """The last lines of a log as people are shown them: numbered as in the file, colour codes and secret values
    taken off, and a progress bar that rewrote its line with carriage returns shown as a terminal shows it, last."""

    first_line: int  # the file's line number of ``lines[0]``
    lines: tuple[str, ...]
    total_lines: int
    modified_at: float  # the file's mtime (epoch seconds)
    cut: bool  # ``lines[0]`` is only the end of its line (the read's byte limit fell inside it)


def parse_log_tail(output: str, max_bytes: int) -> LogTail:
    """What ``argv.log_tail`` printed: ``<mtime> <newline count>``, then at most ``max_bytes`` of the last lines."""
    head, _, body = output.partition("\n")
    mtime, count = head.split()
    if not body:
        raw, last = [], int(count)
    elif body.endswith("\n"):
        raw, last = body.split("\n")[:-1], int(count)  # the file's last line is complete: wc counted it
    else:
        raw, last = body.split("\n"), int(count) + 1  # a last line still being written has no newline yet
    shown = tuple(scrub_secrets(_as_shown(line)) for line in raw)
    return LogTail(first_line=last - len(shown) + 1, lines=shown, total_lines=last, modified_at=float(mtime),
                   cut=len(body.encode()) >= max_bytes)


def _as_shown(line: str) -> str:
    line = strip_ansi(line.rstrip("\r")).rsplit("\r", 1)[-1]
    return line if len(line) <= SHOWN_LINE_CHARS else line[:SHOWN_LINE_CHARS] + " …"
