"""The checklist of ``ecron check-service``: its rules, their verdicts, and how an answer
is told in a few words (the checks themselves are in ``service_checks`` and
``batch_checks``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ecron.core import RemoteStatus, Report
from ecron.executor.http import CallOutcome, OutcomeKind


class Verdict(StrEnum):
    """How one rule went."""

    #: The service did what PROTOCOL.md asks.
    PASS = "pass"  # noqa: S105  (a verdict, not a password)
    #: ecron copes with what the service did, but it is not what the protocol asks.
    WARN = "warn"
    #: The service broke the rule: ecron would not run its tasks as meant.
    FAIL = "fail"
    #: Not checked, because an earlier rule failed.
    SKIP = "skip"


#: Worse verdicts win when one rule sees several answers.
_RANK = {Verdict.PASS: 0, Verdict.SKIP: 1, Verdict.WARN: 2, Verdict.FAIL: 3}

#: Every rule, in the order it is checked, and what it asks of the service.
RULES: dict[str, str] = {
    "trigger": "a trigger (POST) with a new eid answers 2xx and a report",
    "poll": "a poll (GET) of that eid answers 2xx and a report",
    "repeat-trigger": "a second trigger with the same eid answers 2xx and that execution's report",
    "nothing-started-twice": "the repeat and the poll after it show the same execution going on",
    "cancel": "a cancel (DELETE) of that eid is acknowledged",
    "stopped-after-cancel": "after the cancel, polls show the execution ended",
    "unknown-poll": "a poll of an eid never triggered answers 404 or UNKNOWN",
    "unknown-cancel": "a cancel of an eid never triggered answers 404 or UNKNOWN",
}

#: The rules of a batch endpoint (``--batch-poll-url``), checked after the repeated trigger
#: and before the cancel, with one batch poll about the eid and an eid never triggered.
BATCH_RULES: dict[str, str] = {
    "batch-answer": 'one batch poll of that eid and an unknown eid answers 2xx {"reports": {...}}',
    "batch-report": "the batch answer holds a report (RUNNING, SUCCESS or FAILED) of that eid",
    "batch-unknown": "the batch answer leaves the unknown eid out, or reports it UNKNOWN",
    "batch-agrees": "the batch answer's report of that eid agrees with the polls around it",
}
_SAYS = {**RULES, **BATCH_RULES}
#: The batch rules come after this one.
_BATCH_AFTER = "nothing-started-twice"

FINAL = frozenset({RemoteStatus.SUCCESS, RemoteStatus.FAILED})


def rules_checked(batch: bool) -> tuple[str, ...]:
    """The rules of one check, in order: ``RULES``, and ``BATCH_RULES`` with a batch
    endpoint."""
    if not batch:
        return tuple(RULES)
    rules = list(RULES)
    at = rules.index(_BATCH_AFTER) + 1
    return (*rules[:at], *BATCH_RULES, *rules[at:])


@dataclass(frozen=True, slots=True)
class Check:
    """The verdict on one rule, and what was seen."""

    rule: str
    verdict: Verdict
    detail: str

    @property
    def says(self) -> str:
        """The rule in words."""
        return _SAYS[self.rule]


@dataclass
class Checklist:
    """Every rule's verdict, for one service."""

    url: str
    eid: str
    unknown_eid: str
    checks: dict[str, Check] = field(default_factory=dict)
    #: The rules checked, in order (``rules_checked``).
    rules: tuple[str, ...] = tuple(RULES)

    @property
    def passed(self) -> bool:
        """True when no rule failed (warnings do not fail the check)."""
        return all(check.verdict is not Verdict.FAIL for check in self.checks.values())

    def ordered(self) -> list[Check]:
        """The checks in the order of ``rules``; a rule never reached is skipped."""
        skipped = "not checked: an earlier rule failed"
        return [self.checks.get(rule, Check(rule, Verdict.SKIP, skipped)) for rule in self.rules]

    def note(self, rule: str, verdict: Verdict, detail: str) -> None:
        """Record a verdict on ``rule``: it replaces an earlier one unless that was worse, so
        that a rule seeing several answers keeps the worst (and, of equals, the latest)."""
        known = self.checks.get(rule)
        if known is None or _RANK[verdict] >= _RANK[known.verdict]:
            self.checks[rule] = Check(rule, verdict, detail)

    def failed(self, rule: str) -> bool:
        """True when ``rule`` was checked and failed."""
        check = self.checks.get(rule)
        return check is not None and check.verdict is Verdict.FAIL

    def as_json(self) -> dict[str, Any]:
        """The checklist as a JSON object (``--json``)."""
        checks = self.ordered()
        return {
            "url": self.url,
            "execution_id": self.eid,
            "unknown_execution_id": self.unknown_eid,
            "passed": self.passed,
            "counts": {v.value: sum(c.verdict is v for c in checks) for v in Verdict},
            "checks": [
                {"rule": c.rule, "says": c.says, "verdict": c.verdict.value, "detail": c.detail}
                for c in checks
            ],
        }


def seen(outcome: CallOutcome) -> str:
    """What an answer was, in a few words: ``HTTP 200, RUNNING 40%: step 8 of 20``."""
    report = outcome.report
    if report is not None:
        text = f"HTTP {outcome.http_status}, {said(report)}"
        return text + (f": {report.message[:100]}" if report.message else "")
    if outcome.kind is OutcomeKind.BAD_REPORT:
        return f"HTTP {outcome.http_status}, not a report ({outcome.detail})"
    if outcome.http_status is not None:
        return f"HTTP {outcome.http_status}"
    return outcome.detail


def said(report: Report) -> str:
    """A report in a few words: ``RUNNING 40%``."""
    return f"{report.status}" + ("" if report.progress is None else f" {report.progress:g}%")


def restarted(before: list[Report], after: Report) -> str | None:
    """Why ``after`` cannot be the same execution as the reports ``before`` it, or None:
    an ended execution running again, or its progress gone back."""
    ended = next((report for report in before if report.status in FINAL), None)
    if ended is not None and after.status is not ended.status:
        return f"it had ended {ended.status}, then answered {after.status}"
    top = max((r.progress for r in before if r.progress is not None), default=None)
    if top is not None and after.progress is not None and after.progress < top:
        return f"its progress went back from {top:g}% to {after.progress:g}%"
    return None


def moved(first: Report, later: Report) -> bool:
    """True when ``later`` shows the execution further on than ``first``."""
    return later.status is not first.status or (
        later.progress is not None and later.progress != first.progress
    )


def report_warnings(report: Report) -> tuple[Verdict, str]:
    """WARN and the parts ecron ignored, when a report had any (e.g. a progress that is not a
    number); else PASS."""
    if not report.warnings:
        return Verdict.PASS, ""
    return Verdict.WARN, f" (ecron ignores: {'; '.join(report.warnings)})"


def signing_hint(outcome: CallOutcome, signed: bool) -> str:
    """After a 401 or 403, what to try about the signature (``signed``: --secret given)."""
    if outcome.http_status not in (401, 403):
        return ""
    if signed:
        return " (the signature was refused: is --secret the service's, and its clock right?)"
    return " (does the service want signed requests? pass --secret)"
