"""The hypothesis-test loop of an incident thread: hypotheses, notes, and what decided them.

Pure: the thread record is a value; events (a status snapshot, an attempt's result, a person's
decision) return a new record. Some hypotheses are decided by evidence, e.g. "leftover GPU
memory" is refuted when a snapshot shows clean GPUs and the same failure repeats afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bot.core.attempts import SAME_FLAGS, Attempt, AttemptStatus, Transition
from bot.core.commands import typed_text
from bot.core.diagnosis import HOST_OOM_KILL, NOT_A_CAUSE
from bot.core.experiments import made_budget_change, made_experiment
from bot.core.status import TargetStatus, is_clean, memory_evidence
from bot.errors import UsageError

# how triage words the hypothesis it proposes, and how it is recognised again
TRIAGE_HYPOTHESIS = re.compile(r"^the first cause is (\w+) \(proposed by triage of ")


def triage_hypothesis(label: str, attempt_id: str) -> str:
    return f"the first cause is {label} (proposed by triage of {attempt_id})"


RESIDUAL_MEMORY = re.compile(r"leftover|left-?over|residual|stale (?:gpu )?memory|orphan|previous run|old process|"
                             r"memory (?:still )?held|zombie|occupied", re.I)  # triage's gpu_memory_occupied


@dataclass(frozen=True)
class Hypothesis:
    id: str  # H1, H2, ...
    text: str
    author: str
    created_at: float
    status: str = "open"  # open | confirmed | refuted
    decided_by: str = ""  # who or what decided it
    why: str = ""
    tested_by: tuple[str, ...] = ()  # attempt ids / observations
    decided_at: float | None = None  # when it was decided (None: open, or decided before this was kept)

    @property
    def about_residual_memory(self) -> bool:
        return bool(RESIDUAL_MEMORY.search(self.text))


@dataclass(frozen=True)
class Observation:
    at: float
    kind: str  # status | attempt | note
    text: str
    clean_gpus: bool | None = None  # no process and no held memory: a status's (or a triage's) reading of the
    # node's GPUs, or an attempt's pre-flight reading of the GPUs it launched on (None: not read)
    attempt: str | None = None
    outcome: str | None = None  # attempts: ready | failed | ...
    label: str | None = None  # attempts: the triage label, if triaged
    changes: tuple[str, ...] = ()  # attempts: what they changed against the attempt before


@dataclass(frozen=True)
class Recorded:
    """What a person's word put in the thread's record: a hypothesis, a decision on one, or a note."""
    kind: str  # hypothesis | confirmed | refuted | note
    text: str
    hypothesis_id: str = ""
    author: str = ""

    @property
    def from_terminal(self) -> bool:
        return self.author.startswith("cli:")

    @property
    def plain(self) -> str:
        """What was recorded, in plain words: `H2: <text>`, `H1 refuted: <why>`, `note: <text>`."""
        head = {"hypothesis": f"{self.hypothesis_id}:", "note": "note:"}.get(
            self.kind, f"{self.hypothesis_id} {self.kind}:")
        return f"{head} {self.text}"


@dataclass(frozen=True)
class Incident:
    channel: str
    thread_ts: str
    node: str | None = None
    vmid: int | None = None
    summary_ts: str | None = None
    summary_digest: str | None = None  # of the summary as last sent: an unchanged one is not sent again
    hypotheses: tuple[Hypothesis, ...] = ()
    observations: tuple[Observation, ...] = ()
    attempts: tuple[str, ...] = ()
    # words recorded where no one in the thread saw them said (a terminal): the bot says each in the thread once,
    # when it next brings the summary up to date
    announcements: tuple[Recorded, ...] = ()

    def add_hypothesis(self, text: str, author: str, at: float) -> tuple[Incident, Hypothesis]:
        hypothesis = Hypothesis(f"H{len(self.hypotheses) + 1}", text.strip()[:RECORD_TEXT_MAX], author, at)
        return replace(self, hypotheses=(*self.hypotheses, hypothesis)), hypothesis

    def propose_triage(self, label: str, attempt_id: str, at: float) -> Incident:
        """A triage's first cause as the thread's hypothesis, once per label (a repeat of the same finding, or
        a log no rule explains or one that shows no failure, adds none)."""
        if label in NOT_A_CAUSE or any(h.author == "gpuops" and h.text.startswith(f"the first cause is {label} (")
                                     for h in self.hypotheses):
            return self
        return self.add_hypothesis(triage_hypothesis(label, attempt_id), "gpuops", at)[0]

    def decide(self, hypothesis_id: str, status: str, by: str, why: str, tested_by: str | None = None,
               at: float | None = None) -> Incident:
        if status not in ("confirmed", "refuted", "open"):
            raise ValueError(f"status {status!r}")
        found = False
        updated = []
        for h in self.hypotheses:
            if h.id.lower() == hypothesis_id.lower():
                found = True
                h = replace(h, status=status, decided_by=by, why=why[:RECORD_TEXT_MAX],
                            tested_by=h.tested_by + ((tested_by,) if tested_by else ()),
                            decided_at=None if status == "open" else at)
            updated.append(h)
        if not found:
            raise KeyError(hypothesis_id)
        return replace(self, hypotheses=tuple(updated))

    def observe(self, observation: Observation) -> Incident:
        incident = replace(self, observations=(*self.observations, observation))
        if observation.attempt and observation.attempt not in incident.attempts:
            incident = replace(incident, attempts=(*incident.attempts, observation.attempt))
        return incident.auto_decide()

    def auto_decide(self) -> Incident:
        """Decide what the evidence decides; leave the rest to people."""
        incident = self._decide_by_experiments()
        for h in incident.hypotheses:
            if h.status != "open" or not h.about_residual_memory:
                continue
            # the first reading of clean GPUs since the hypothesis: a status's, or the pre-flight of an attempt
            # that finished since (that attempt ran on them, and decides as one that came after the reading)
            clean = next((o for o in self.observations if o.clean_gpus and o.at >= h.created_at), None)
            if clean is None:
                continue
            after = [o for o in self.observations if o.kind == "attempt" and (o.at > clean.at or o is clean)]
            failures_before = [o for o in self.observations if o.kind == "attempt" and o.outcome == "failed"
                               and o.at < clean.at]
            repeats = [o for o in after if o.outcome == "failed" and (
                not failures_before or not o.label or not failures_before[-1].label
                or o.label == failures_before[-1].label)]
            if repeats:
                seen = (f"{clean.attempt}'s pre-flight found its GPUs clean" if clean.kind == "attempt"
                        else f"the GPUs were clean ({clean.text})")
                incident = incident.decide(h.id, "refuted", "gpuops",
                                           f"{seen} and the failure repeated in {repeats[0].attempt}",
                                           repeats[0].attempt, repeats[0].at)
                continue
            # held memory seen, then freed, and the failed launch relaunched unchanged starts: the leftovers were it
            held_before = any(o.clean_gpus is False and o.at < clean.at for o in self.observations)
            started = next((o for o in after if o.outcome in ("ready", "failed")), None)
            if held_before and failures_before and started is not None and started.outcome == "ready" \
                    and set(started.changes) <= {SAME_FLAGS}:
                freed = f"{clean.attempt}'s pre-flight found them clean" if clean.kind == "attempt" else clean.text
                incident = incident.decide(
                    h.id, "confirmed", "gpuops",
                    f"memory held on the GPUs was freed ({freed}) and {started.attempt} started with the same flags",
                    started.attempt, started.at)
        return incident

    def _decide_by_experiments(self) -> Incident:
        """A triage hypothesis "the first cause is <label>" is decided by the attempt that made the
        label's experiment after it: started with the feature off (or the switch on) -> confirmed;
        failed the same way without it -> refuted. Another failure decides nothing."""
        incident = self
        for h in self.hypotheses:
            proposed = TRIAGE_HYPOTHESIS.match(h.text)
            if h.status != "open" or h.author != "gpuops" or proposed is None:
                continue
            label = proposed.group(1)
            for o in self.observations:
                if o.kind != "attempt" or o.at < h.created_at or o.attempt is None:
                    continue
                budgeted = made_budget_change(label, o.changes)
                if budgeted is not None and o.outcome == "ready":
                    kind, what = (("a raised limit", "the container's memory limit") if label == HOST_OOM_KILL
                                  else ("a budget change", "the memory budget"))
                    incident = incident.decide(h.id, "confirmed", "gpuops",
                                               f"{o.attempt} with `{budgeted}` ({kind}) started: {what} was the cause",
                                               o.attempt, o.at)
                    break
                change = made_experiment(label, o.changes)
                if change is None:
                    continue
                if o.outcome == "ready":
                    incident = incident.decide(h.id, "confirmed", "gpuops",
                                               f"{o.attempt} with `{change}` started: the failure went with it",
                                               o.attempt, o.at)
                    break
                if o.outcome == "failed" and o.label == label:
                    incident = incident.decide(h.id, "refuted", "gpuops",
                                               f"{o.attempt} with `{change}` failed the same way ({label})", o.attempt,
                                               o.at)
                    break
        return incident

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        values = dict(data)
        values["hypotheses"] = tuple(Hypothesis(**{**h, "tested_by": tuple(h.get("tested_by", ()))})
                                     for h in data.get("hypotheses", []))
        values["observations"] = tuple(Observation(**{**o, "changes": tuple(o.get("changes", ()))})
                                       for o in data.get("observations", []))
        values["attempts"] = tuple(data.get("attempts", ()))
        values["announcements"] = tuple(Recorded(**r) for r in data.get("announcements", ()))
        return cls(**values)


@dataclass(frozen=True)
class Event:
    """One thing a thread's record holds, when it happened: a hypothesis raised or decided, a note, a reading of the
    GPUs, an attempt's step (launched, ready, failed, stopped). The summary shows the latest; ``@gpuops history``
    shows them all, in order."""
    at: float
    kind: str  # raised | decided | note | status | attempt
    hypothesis: Hypothesis | None = None
    observation: Observation | None = None  # an attempt's end as observed, when its record is not at hand
    attempt: Attempt | None = None  # with the step it took
    transition: Transition | None = None


def timeline(incident: Incident, attempts: Sequence[Attempt] = ()) -> tuple[Event, ...]:
    """The thread's record oldest first: each hypothesis where it was raised and again where it was decided (a
    decision recorded before decisions kept their time shows on the hypothesis alone), each note and reading where
    it was made, and each step of the container's ``attempts`` (an attempt observed in the thread but not among them
    by its observed end). A decision comes after what happened at the same moment (the attempt that decided it)."""
    events = [Event(h.created_at, "raised", hypothesis=h) for h in incident.hypotheses]
    events += [Event(h.decided_at, "decided", hypothesis=h) for h in incident.hypotheses
               if h.status != "open" and h.decided_at is not None]
    events += [Event(t.at, "attempt", attempt=a, transition=t) for a in attempts for t in a.transitions
               if t.status is not AttemptStatus.PLANNED]
    read = {a.id for a in attempts}
    events += [Event(o.at, o.kind, observation=o) for o in incident.observations
               if o.kind != "attempt" or o.attempt not in read]
    return tuple(sorted(events, key=lambda e: (e.at, e.kind == "decided")))


@dataclass(frozen=True)
class Mention:
    verb: str  # triage | status | hypothesis | note | history | confirm | refute | help
    rest: str = ""
    target: str = field(default="")


MENTION_VERBS = ("triage", "status", "log", "hypothesis", "note", "history", "confirm", "refute", "help")
RECORD_VERBS = ("hypothesis", "note", "confirm", "refute")  # the words that change the thread's record
RECORD_TEXT_MAX = 500  # characters of a person's word the record keeps: the summary stays readable in one message


SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")


def person(author: str) -> str:
    """How a record's author reads in Slack: a Slack user id as a mention, anyone else (``cli:<login>``, ``gpuops``)
    as written."""
    return f"<@{author}>" if SLACK_USER_ID.fullmatch(author) else author


def hypothesis_ref(word: str) -> str:
    """A hypothesis as a person names it: `H2`, `h2`, `2`, `#2`, `H2:` -> `H2`."""
    ref = word.strip().strip("#:,.;()[]").upper()
    return f"H{ref}" if ref.isdigit() else ref


def record_word(incident: Incident, verb: str, text: str, hypothesis_id: str, author: str,
                at: float) -> tuple[Incident, Recorded]:
    """A person's hypothesis, note or decision recorded in the thread's record. ``author`` is a Slack user id, or
    ``cli:<login>`` from a terminal. Raises UsageError for a word that says too little, more than the record keeps
    (never cut short: what is recorded is what was said), or names no hypothesis of the thread."""
    text, who = text.strip(), person(author)
    if len(text) > RECORD_TEXT_MAX:
        what = "reason" if verb in ("confirm", "refute") else verb
        raise UsageError(f"the thread's record keeps a {what} of up to {RECORD_TEXT_MAX} characters, and this one has "
                         f"{len(text):,}: nothing was recorded. Say it in fewer words, or over several notes")
    if verb == "hypothesis":
        if not text:
            raise UsageError("say what the hypothesis is: `hypothesis <text>`")
        incident, hypothesis = incident.add_hypothesis(text, author, at)
        return incident, Recorded("hypothesis", hypothesis.text, hypothesis.id, author)
    if verb in ("confirm", "refute"):
        status = "confirmed" if verb == "confirm" else "refuted"
        hypothesis_id = hypothesis_ref(hypothesis_id)
        if not hypothesis_id:
            raise UsageError(f"name the hypothesis and why: `{verb} H1 <why>`")
        why = text or "(no reason given)"
        try:
            incident = incident.decide(hypothesis_id, status, who, why, at=at)
        except KeyError:
            known = ", ".join(h.id for h in incident.hypotheses)
            raise UsageError(f"no hypothesis `{hypothesis_id}` in this thread"
                             + (f" (it has {known})" if known else " (it has none yet)")) from None
        return incident, Recorded(status, why, hypothesis_id, author)
    if verb == "note":
        if not text:
            raise UsageError("say what to note: `note <text>`")
        note = Observation(at, "note", f"{who}: {text}")
        return incident.observe(note), Recorded("note", text, author=author)
    raise UsageError(f"`{verb}` records nothing in a thread; one of {', '.join(RECORD_VERBS)} does")


def parse_mention(text: str, bot_user_id: str = "") -> Mention:
    """`<@U123> hypothesis leftover memory` -> Mention("hypothesis", "leftover memory"). The bot's own mention is
    taken off (the leading one when its id is not known); anyone else's is part of what was said, and kept
    (`note asked <@U0BOB> to check NCCL`)."""
    own = rf"<@{re.escape(bot_user_id)}(?:\|[^<>]*)?>" if bot_user_id else r"^\s*<@[A-Z0-9]+(?:\|[^<>]*)?>"
    cleaned = typed_text(re.sub(own, "", text)).strip()
    verb, _, rest = cleaned.partition(" ")
    verb = verb.lower().strip(":,")
    if verb not in MENTION_VERBS:
        return Mention("help", cleaned)
    if verb in ("confirm", "refute"):
        hid, _, why = rest.strip().partition(" ")
        return Mention(verb, why.strip(), hid.strip())
    return Mention(verb, rest.strip())


def gpu_reading(at: float, statuses: Sequence[TargetStatus], by: str = "") -> Observation:
    """A reading of the GPUs as the thread's evidence: a status's, or (``by``) the snapshot a triage took."""
    clean = is_clean(statuses)
    lead = f"{by}'s reading: " if by else ""
    return Observation(at, "status", f"{lead}{'GPUs clean' if clean else 'GPUs not clean'}: "
                                     f"{memory_evidence(statuses)}", clean_gpus=clean)


def with_attempts(incident: Incident, attempts: Sequence[Attempt], now: float, watch_s: float) -> Incident:
    """Finished attempts on the incident's container become observations (which may decide hypotheses),
    each once, oldest first. A launch given up on whose server may yet come up (``watch_s``: how long after the give-up
    its log is read on) is not finished: it is observed once it came up or ended, or the watch is over."""
    for attempt in sorted(attempts, key=lambda a: a.created_at):
        if attempt.id in incident.attempts or attempt.status.value in ("planned", "launching") \
                or attempt.may_yet_come_up(now, watch_s):
            continue
        at = attempt.transitions[-1].at if attempt.transitions else attempt.created_at
        incident = incident.observe(Observation(at, "attempt", f"{attempt.id} {attempt.status.value}",
                                                clean_gpus=attempt.found_gpus_clean,
                                                attempt=attempt.id, outcome=attempt.status.value,
                                                label=attempt.observed.get("triage"), changes=attempt.changes))
    return incident
