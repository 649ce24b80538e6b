"""The checks of ``ecron check-service``: does a user service follow PROTOCOL.md?

Every request goes out through the executor's own ``HttpCaller`` (the same headers, the
same signature, the same body cap and timeouts) and every answer is read by its
``classify`` and ``core.parse_report``: what passes here is what the daemon will accept.
The checks run in a fixed order on one fresh execution id, and whatever they started is
cancelled at the end, whatever failed on the way.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import aiohttp

from ecron.config.model import CallSettings
from ecron.core import RemoteStatus, Report
from ecron.executor.http import CallContext, CallOutcome, HttpCaller, OutcomeKind, expand
from ecron.executor.outcomes import CANCEL_RETRYABLE
from ecron.ids import new_eid


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

#: The deadline sent with the checks' calls: work the check could not cancel stops by itself
#: at a service that honours ``X-Ecron-Deadline``.
DEADLINE = timedelta(minutes=10)
_FINAL = frozenset({RemoteStatus.SUCCESS, RemoteStatus.FAILED})


@dataclass(frozen=True, slots=True)
class Check:
    """The verdict on one rule, and what was seen."""

    rule: str
    verdict: Verdict
    detail: str

    @property
    def says(self) -> str:
        """The rule in words."""
        return RULES[self.rule]


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What to check and how: the call settings of a task, and the pace of the checks."""

    call: CallSettings
    task: str = "check-service"
    #: How long to watch the execution move (before the repeat, and after the cancel).
    watch: float = 3.0
    #: Seconds between two polls while watching.
    poll_interval: float = 0.25


@dataclass
class Checklist:
    """Every rule's verdict, for one service."""

    url: str
    eid: str
    unknown_eid: str
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when no rule failed (warnings do not fail the check)."""
        return all(check.verdict is not Verdict.FAIL for check in self.checks.values())

    def ordered(self) -> list[Check]:
        """The checks in the order of ``RULES``; a rule never reached is skipped."""
        skipped = Check("", Verdict.SKIP, "not checked: an earlier rule failed")
        return [self.checks.get(rule, _replace_rule(skipped, rule)) for rule in RULES]

    def note(self, rule: str, verdict: Verdict, detail: str) -> None:
        """Record a verdict on ``rule``: it replaces an earlier one unless that was worse, so
        that a rule seeing several answers keeps the worst (and, of equals, the latest)."""
        known = self.checks.get(rule)
        if known is None or _RANK[verdict] >= _RANK[known.verdict]:
            self.checks[rule] = Check(rule, verdict, detail)

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


def _replace_rule(check: Check, rule: str) -> Check:
    return Check(rule, check.verdict, check.detail)


def seen(outcome: CallOutcome) -> str:
    """What an answer was, in a few words: ``HTTP 200, RUNNING 40%: step 8 of 20``."""
    report = outcome.report
    if report is not None:
        text = f"HTTP {outcome.http_status}, {_said(report)}"
        return text + (f": {report.message[:100]}" if report.message else "")
    if outcome.kind is OutcomeKind.BAD_REPORT:
        return f"HTTP {outcome.http_status}, not a report ({outcome.detail})"
    if outcome.http_status is not None:
        return f"HTTP {outcome.http_status}"
    return outcome.detail


def _said(report: Report) -> str:
    """A report in a few words: ``RUNNING 40%``."""
    return f"{report.status}" + ("" if report.progress is None else f" {report.progress:g}%")


def restarted(before: list[Report], after: Report) -> str | None:
    """Why ``after`` cannot be the same execution as the reports ``before`` it, or None:
    an ended execution running again, or its progress gone back."""
    ended = next((report for report in before if report.status in _FINAL), None)
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


def check_templates(call: CallSettings) -> None:
    """Raise ``ValueError`` when the poll or cancel template names an unknown placeholder."""
    ctx = CallContext("eid", "eid", "task", datetime.now(UTC), None, 1)
    for name, template in (("poll URL", call.poll_url), ("cancel URL", call.cancel_url)):
        try:
            expand(template, call, ctx)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"the {name} {template!r} is not a template of {{url}}, {{execution_id}} "
                f"and {{task}}: {exc}"
            ) from exc


async def run_checks(options: CheckOptions) -> Checklist:
    """Run every check against the service at ``options.call.url``; the checklist."""
    async with aiohttp.ClientSession() as session:
        caller = HttpCaller(session, public_url=None, callback_secret="")
        run = ServiceCheck(caller, options)
        await run.run()
        return run.checklist


class ServiceCheck:
    """One run of the checks: a fresh eid triggered, watched, repeated and cancelled, and
    an eid the service never saw asked about."""

    def __init__(self, caller: HttpCaller, options: CheckOptions) -> None:
        self.caller = caller
        self.options = options
        self.call = options.call
        now = caller.clock.now()
        eid, unknown = new_eid(), new_eid()
        self.ctx = CallContext(eid, eid, options.task, now, now + DEADLINE, 1)
        self.unknown_ctx = CallContext(unknown, unknown, options.task, now, now + DEADLINE, 1)
        self.checklist = Checklist(self.call.url, eid, unknown)
        #: Every report seen about the eid, in order, and how many polls were made.
        self.reports: list[Report] = []
        self.polls = 0

    async def run(self) -> None:
        """Every check, in order; the cancel is sent whatever happened before it."""
        first = await self.caller.trigger(self.call, self.ctx)
        if first.kind is OutcomeKind.UNSENT:
            self._trigger(first)
            return  # nothing reached the service: every other check would say the same
        accepted = False
        try:
            accepted = self._trigger(first)
            if accepted:
                await self._watch_and_repeat()
        finally:  # even after an error or Ctrl-C: leave nothing running on the service
            cancel = await self._send_cancel()
        self._judge_cancel(cancel, accepted)
        if accepted:
            await self._after_cancel()
        await self._unknown()

    def _trigger(self, outcome: CallOutcome) -> bool:
        """Judge the first trigger's answer; True when it accepted the execution."""
        note = self.checklist.note
        if outcome.kind is OutcomeKind.REPORT:
            assert outcome.report is not None
            self.reports.append(outcome.report)
            verdict, extra = _report_warnings(outcome.report)
            if outcome.report.status is RemoteStatus.FAILED:
                extra += " (the work failed at once: does the service want a --body?)"
            note("trigger", verdict, seen(outcome) + extra)
            return True
        why = {
            OutcomeKind.UNKNOWN: "ecron would end the execution FAILED rejected",
            OutcomeKind.REJECTED: "ecron would end the execution FAILED rejected, no retry",
            OutcomeKind.TRANSIENT: "ecron would retry the trigger, then end it FAILED",
            OutcomeKind.BAD_REPORT: "ecron would end the execution FAILED protocol_error",
            OutcomeKind.NO_ANSWER: "ecron would poll to learn whether the work started",
            OutcomeKind.UNSENT: "ecron would retry the trigger, then end it FAILED",
        }[outcome.kind]
        note("trigger", Verdict.FAIL, f"{seen(outcome)}: {why}{self._signing_hint(outcome)}")
        return False

    def _signing_hint(self, outcome: CallOutcome) -> str:
        if outcome.http_status not in (401, 403):
            return ""
        if self.call.secret:
            return " (the signature was refused: is --secret the service's, and its clock right?)"
        return " (does the service want signed requests? pass --secret)"

    async def _watch_and_repeat(self) -> None:
        """Poll until the execution moves, trigger it again, poll once more, and judge."""
        polled = await self._watch()
        before = list(self.reports)
        repeat = await self.caller.trigger(self.call, self.ctx)
        if not self._repeat(repeat):
            return
        assert repeat.report is not None
        after = await self._poll("poll") if polled else None
        self._judge_restart(before, repeat.report, after, polled)

    def _judge_restart(
        self, before: list[Report], repeat: Report, after: Report | None, polled: bool
    ) -> None:
        """Did the repeated trigger (answering ``repeat``) start the work again?"""
        rule = "nothing-started-twice"
        problem = restarted(before, repeat)
        if problem is None and after is not None:
            problem = restarted([*before, repeat], after)
        if problem is not None:
            detail = f"{problem}: the repeated trigger started the work again"
            self.checklist.note(rule, Verdict.FAIL, detail)
        elif not polled:
            self.checklist.note(rule, Verdict.SKIP, "not checked: the polls failed")
        elif any(moved(before[0], report) or report.status in _FINAL for report in self.reports):
            self.checklist.note(rule, Verdict.PASS, f"the repeat answered {_said(repeat)}")
        else:
            self.checklist.note(
                rule,
                Verdict.WARN,
                "could not be told: the reports did not move while watched, so a new start "
                "would look the same (report progress, or watch longer with --watch)",
            )

    async def _watch(self) -> bool:
        """Poll the eid until its report moves or ``watch`` has passed; False on a bad poll."""
        first = self.reports[0]
        until = time.monotonic() + self.options.watch
        while True:
            await asyncio.sleep(self.options.poll_interval)
            report = await self._poll("poll")
            if report is None:
                return False
            if moved(first, report) or report.status in _FINAL or time.monotonic() >= until:
                return True

    async def _poll(self, rule: str) -> Report | None:
        """One poll of the eid, judged under ``rule``; its report, or None when it had none."""
        outcome = await self.caller.poll(self.call, self.ctx)
        if outcome.kind is OutcomeKind.REPORT:
            assert outcome.report is not None
            self.reports.append(outcome.report)
            self.polls += 1
            verdict, extra = _report_warnings(outcome.report)
            detail = f"{self.polls} polls, the last: {seen(outcome)}{extra}"
            self.checklist.note(rule, verdict, detail)
            return outcome.report
        if outcome.kind is OutcomeKind.UNKNOWN:
            why = "the service lost an eid it had accepted (ecron: FAILED lost)"
        elif outcome.kind is OutcomeKind.BAD_REPORT:
            why = "a failed probe of kind protocol error"
        else:
            why = "a failed probe (after max_probe_failures in a row: FAILED unreachable)"
        detail = f"{seen(outcome)}: {why}{self._signing_hint(outcome)}"
        self.checklist.note(rule, Verdict.FAIL, detail)
        return None

    def _repeat(self, outcome: CallOutcome) -> bool:
        """Judge the repeated trigger's answer; True when it is a report of the execution."""
        if outcome.kind is OutcomeKind.REPORT:
            assert outcome.report is not None
            self.reports.append(outcome.report)
            verdict, extra = _report_warnings(outcome.report)
            self.checklist.note("repeat-trigger", verdict, seen(outcome) + extra)
            return True
        why = {
            OutcomeKind.UNKNOWN: "the service forgot the eid it had just accepted",
            OutcomeKind.REJECTED: "a repeat must answer the execution's current report, not "
            "an error: ecron repeats a trigger whose answer was lost, and would end the "
            "execution FAILED rejected",
            OutcomeKind.BAD_REPORT: "ecron would end the execution FAILED protocol_error",
        }.get(outcome.kind, "ecron would retry the trigger, then end it FAILED")
        detail = f"{seen(outcome)}: {why}{self._signing_hint(outcome)}"
        self.checklist.note("repeat-trigger", Verdict.FAIL, detail)
        return False

    async def _send_cancel(self) -> CallOutcome:
        """The cancel call, tried once more after a transient failure as ecron does."""
        outcome = await self.caller.cancel(self.call, self.ctx)
        if outcome.kind in CANCEL_RETRYABLE:
            outcome = await self.caller.cancel(self.call, self.ctx)
        return outcome

    def _judge_cancel(self, outcome: CallOutcome, accepted: bool) -> None:
        """Judge the cancel's answer (``accepted``: the trigger had started an execution)."""
        note = self.checklist.note
        if not accepted:
            detail = f"a cancel was sent anyway, in case work started: {seen(outcome)}"
            note("cancel", Verdict.SKIP, f"not checked: the trigger failed; {detail}")
        elif outcome.kind in (OutcomeKind.REPORT, OutcomeKind.BAD_REPORT):
            note("cancel", Verdict.PASS, f"acknowledged: {seen(outcome)}")
        elif outcome.kind is OutcomeKind.UNKNOWN:
            detail = "acknowledged, but the service forgot an eid it had accepted"
            note("cancel", Verdict.WARN, f"{seen(outcome)}: {detail}")
        else:
            note("cancel", Verdict.FAIL, f"not acknowledged: {seen(outcome)}")

    async def _after_cancel(self) -> None:
        """Poll until the execution is no longer RUNNING, or ``watch`` has passed."""
        until = time.monotonic() + self.options.watch
        while True:
            outcome = await self.caller.poll(self.call, self.ctx)
            report = outcome.report
            running = report is not None and report.status is RemoteStatus.RUNNING
            if not running or time.monotonic() >= until:
                break
            await asyncio.sleep(self.options.poll_interval)
        rule = "stopped-after-cancel"
        if outcome.kind is OutcomeKind.REPORT and not running:
            self.checklist.note(rule, Verdict.PASS, seen(outcome))
        elif running:
            detail = f"{self.options.watch:g}s after the cancel: a cancel should stop the work"
            self.checklist.note(rule, Verdict.WARN, f"still {seen(outcome)} {detail}")
        elif outcome.kind is OutcomeKind.UNKNOWN:
            detail = (
                "the service forgot the eid at once; keep an ended execution's report for a "
                "while, so that a repeated trigger still finds it"
            )
            self.checklist.note(rule, Verdict.WARN, f"{seen(outcome)}: {detail}")
        else:
            self.checklist.note(rule, Verdict.FAIL, f"{seen(outcome)}: a poll must answer a report")

    async def _unknown(self) -> None:
        """Poll and cancel an eid the service never saw: both must say it is unknown."""
        poll = await self.caller.poll(self.call, self.unknown_ctx)
        self._judge_unknown("unknown-poll", poll)
        cancel = await self.caller.cancel(self.call, self.unknown_ctx)
        self._judge_unknown("unknown-cancel", cancel)

    def _judge_unknown(self, rule: str, outcome: CallOutcome) -> None:
        note = self.checklist.note
        if outcome.kind is OutcomeKind.UNKNOWN:
            note(rule, Verdict.PASS, seen(outcome))
        elif outcome.kind is OutcomeKind.REPORT:
            why = (
                "the service made up a report for an eid it never saw: ecron asks this after "
                "a trigger whose answer was lost, and would take work that never started for "
                "work going on"
            )
            note(rule, Verdict.FAIL, f"{seen(outcome)}: {why}")
        elif rule == "unknown-cancel" and outcome.kind is OutcomeKind.BAD_REPORT:
            note(rule, Verdict.WARN, f"{seen(outcome)}: acknowledged, but 404 is what is asked")
        else:
            why = "only 404 or UNKNOWN tells ecron that the work never started"
            note(rule, Verdict.FAIL, f"{seen(outcome)}: {why}{self._signing_hint(outcome)}")


def _report_warnings(report: Report) -> tuple[Verdict, str]:
    """WARN and the parts ecron ignored, when a report had any (e.g. a progress that is not a
    number); else PASS."""
    if not report.warnings:
        return Verdict.PASS, ""
    return Verdict.WARN, f" (ecron ignores: {'; '.join(report.warnings)})"
