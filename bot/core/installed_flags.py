"""A launch's flags against the flags the installed SGLang itself accepts.

gpuops' own table (``flags.MODELLED`` and ``flags.PASSTHROUGH``) knows the flags the memory budget needs and a few
common others; SGLang has hundreds, and adds and retires them between releases. Which flags a launch may use is
decided by the parser of the SGLang installed in the container (``argv.sglang_flags`` prints its option strings), read
the way its argparse reads a command line: ``--flag value``, ``--flag=value``, switches, and unique prefixes. A flag
that parser does not have would stop SGLang at once with ``unrecognized arguments``; the pre-flight says so first,
with the flag it most likely meant.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.core.argv import SGLANG_ENV_MARK, SGLANG_FLAGS_MARK
from bot.core.flags import ALIASES, MODELLED, PASSTHROUGH, SWITCH, flag_spans


@dataclass(frozen=True)
class InstalledFlags:
    """The installed SGLang's option strings: flag -> whether it takes a value."""

    options: Mapping[str, bool]

    def resolve(self, name: str) -> tuple[str, ...]:
        """What ``name`` means to argparse: itself, or every option it is a prefix of (one: an abbreviation;
        several: ambiguous; none: unknown)."""
        if name in self.options:
            return (name,)
        return tuple(sorted(o for o in self.options if o.startswith(name) and o.startswith("--")))


# the flags gpuops itself knows: what a launch is checked against when the installed SGLang's could not be read
GPUOPS_TABLE = InstalledFlags({**{flag: parser is not SWITCH for flag, (_, parser) in MODELLED.items()},
                               **{flag: parser is not SWITCH for flag, parser in PASSTHROUGH.items()},
                               **{alias: MODELLED.get(flag, (None, PASSTHROUGH.get(flag)))[1] is not SWITCH
                                  for alias, flag in ALIASES.items()}})


MAX_LIST_CHARS = 256 * 1024


def parse_installed_flags(output: str) -> InstalledFlags:
    """What ``argv.sglang_flags`` printed (anything SGLang logged while importing comes before the marker)."""
    for line in reversed(output.splitlines()):
        if line.startswith(SGLANG_FLAGS_MARK):
            if len(line) > MAX_LIST_CHARS:  # SGLang has a few hundred flags; this is kept in Redis
                raise ValueError(f"the flag list is over {MAX_LIST_CHARS:,} characters")
            options = json.loads(line[len(SGLANG_FLAGS_MARK):])
            if not isinstance(options, dict) or not options or not all(
                    isinstance(k, str) and k.startswith("-") and isinstance(v, bool) for k, v in options.items()):
                raise ValueError("the flag list is not a map of option strings")
            return InstalledFlags(dict(options))
    raise ValueError("no flag list in the output")


@dataclass(frozen=True)
class FlagProblem:
    """A flag the installed SGLang would refuse: ``given`` as typed (without ``=value``); ``meant``: the flags it
    could mean (ambiguous) or the closest ones SGLang has (unknown)."""

    given: str
    meant: tuple[str, ...]
    ambiguous: bool

    @property
    def correction(self) -> str | None:
        """The one flag to use instead, when there is exactly one likely one."""
        return self.meant[0] if len(self.meant) == 1 and not self.ambiguous else None

    def describe(self, known_by: str) -> str:
        """``known_by``: whose flags these are ("SGLang 0.5.9", "gpuops' flag table")."""
        if self.ambiguous:
            return f"`{self.given}` is ambiguous in {known_by}: it could be " + ", ".join(f"`{m}`" for m in self.meant)
        hint = (" (did you mean " + " or ".join(f"`{m}`" for m in self.meant) + "?)") if self.meant else ""
        return f"{known_by} has no `{self.given}`{hint}"


TYPO_EDITS = 2  # a flag at most this many letters inserted, dropped, changed or swapped away is what was meant


def typo_distance(a: str, b: str) -> int:
    """Letters inserted, dropped, changed or swapped next to each other to turn ``a`` into ``b`` (the optimal string
    alignment distance: what a typo does, unlike a different flag that shares a long prefix)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def likely_meant(name: str, candidates: Iterable[str]) -> tuple[str, ...]:
    """The candidates (flags, variable names) ``name`` is a typo of (closest first, at most two)."""
    near = sorted((d, c) for c in candidates if (d := typo_distance(name, c)) <= TYPO_EDITS)
    return tuple(c for _, c in near[:2])


def flag_problems(installed: InstalledFlags, argv: Sequence[str]) -> tuple[FlagProblem, ...]:
    """The flags in ``argv`` the installed SGLang's parser would refuse, in order."""
    def takes_value(name: str) -> bool | None:
        meant = installed.resolve(name)
        return installed.options[meant[0]] if len(meant) == 1 else None

    problems: list[FlagProblem] = []
    for start, _ in flag_spans(argv, takes_value):
        name = argv[start].partition("=")[0]
        if not argv[start].startswith("--") or len(meant := installed.resolve(name)) == 1:
            continue
        if meant:
            problems.append(FlagProblem(name, meant[:6], ambiguous=True))
        else:
            flags = (o for o in installed.options if o.startswith("--"))
            problems.append(FlagProblem(name, likely_meant(name, flags), ambiguous=False))
    return tuple(problems)


def corrected_argv(argv: Sequence[str], problems: Sequence[FlagProblem]) -> tuple[str, ...] | None:
    """``argv`` with each problem flag replaced by its one correction (values kept); None when any problem has
    no single correction."""
    corrections = {p.given: p.correction for p in problems}
    if not corrections or any(c is None for c in corrections.values()):
        return None
    out = []
    for token in argv:
        name, eq, value = token.partition("=")
        if token.startswith("--") and name in corrections:
            token = f"{corrections[name]}{eq}{value}"
        out.append(token)
    return tuple(out)


def near_miss_notes(not_modelled: Sequence[str]) -> tuple[str, ...]:
    """For flags the budget passed through unread: those a typo away from a flag it reads, which were likely meant
    as that one (said as a note: the budget does not know every flag the installed SGLang has)."""
    return tuple(f"`{p.given}` is close to `{p.correction}`: if that was meant, this budget is without it"
                 for p in flag_problems(GPUOPS_TABLE, not_modelled) if p.correction)


# the variables of SGLang's own namespace: a launch's other words (NCCL_*, CUDA_*, TORCH_*) are read by other code
SGLANG_ENV_PREFIXES = ("SGLANG_", "SGL_")


def parse_env_names(output: str) -> frozenset[str] | None:
    """What ``argv.sglang_env_names`` printed: the names the installed SGLang's source mentions; None when no SGLang
    package is there."""
    for line in reversed(output.splitlines()):
        if line.startswith(SGLANG_ENV_MARK):
            names = json.loads(line[len(SGLANG_ENV_MARK):])
            if names is None:
                return None
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError("the name list is not a list of names")
            return frozenset(names)
    raise ValueError("no name list in the output")


@dataclass(frozen=True)
class UnreadEnv:
    """A variable of a launch's environment that the installed SGLang never mentions: SGLang would not read it."""

    name: str
    meant: tuple[str, ...]  # the names it is a typo of, closest first

    def describe(self, sglang: str) -> str:
        guess = f" (did you mean {' or '.join(f'`{m}`' for m in self.meant)}?)" if self.meant else ""
        return f"{sglang} never mentions `{self.name}`{guess}: it would be ignored"


def sglang_variables(env: Sequence[str]) -> tuple[str, ...]:
    """The names of ``env``'s NAME=VALUE words in SGLang's own namespace (SGLANG_*, SGL_*), in order."""
    return tuple(name for word in env if (name := word.partition("=")[0]).startswith(SGLANG_ENV_PREFIXES))


def unread_env(env: Sequence[str], known: frozenset[str]) -> tuple[UnreadEnv, ...]:
    """The SGLANG_*/SGL_* words of ``env`` (NAME=VALUE) whose name the installed SGLang's source does not mention,
    each with the names it is likely a typo of."""
    return tuple(UnreadEnv(name, likely_meant(name, known)) for name in sglang_variables(env) if name not in known)
