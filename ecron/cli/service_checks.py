"""The checks of ``ecron check-service``: does a user service follow PROTOCOL.md?

Every request goes out through the executor's own ``HttpCaller`` (the same headers, the
same signature, the same body cap and timeouts) and every answer is read by its
``classify`` and ``core.parse_report``: what passes here is what the daemon will accept.
The checks run in a fixed order on one fresh execution id, and whatever they started is
cancelled at the end, whatever failed on the way. With a ``batch_poll_url`` the batch
endpoint is asked too, by ``executor/batch.py``'s own ``batch_answer`` (judged in
``batch_checks``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ecron.cli.batch_checks import judge_batch
from ecron.cli.checklist import (
    FINAL,
    Checklist,
    Verdict,
    moved,
    report_warnings,
    restarted,
    rules_checked,
    said,
    seen,
    signing_hint,
)
from ecron.config.model import CallSettings
from ecron.core import RemoteStatus, Report
from ecron.executor.batch import batch_answer
from ecron.executor.http import CallContext, CallOutcome, HttpCaller, OutcomeKind, expand
from ecron.executor.outcomes import CANCEL_RETRYABLE
from ecron.executor.wire import Wire
from ecron.ids import new_eid

#: The deadline sent with the checks' calls: work the check could not cancel stops by itself
#: at a service that honours ``X-Ecron-Deadline``.
DEADLINE = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What to check and how: the call settings of a task, and the pace of the checks."""

    call: CallSettings
    task: str = "check-service"
    #: How long to watch the execution move (before the repeat, and after the cancel).
    watch: float = 3.0
    #: Seconds between two polls while watching.
    poll_interval: float = 0.25


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
    async with Wire() as wire:
        caller = HttpCaller(wire, public_url=None, callback_secret="")
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
        rules = rules_checked(self.call.batch_poll_url is not None)
        self.checklist = Checklist(self.call.url, eid, unknown, rules=rules)
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
                if self.call.batch_poll_url is not None:
                    await self._batch()
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
            verdict, extra = report_warnings(outcome.report)
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
        return signing_hint(outcome, bool(self.call.secret))

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
        elif any(moved(before[0], report) or report.status in FINAL for report in self.reports):
            self.checklist.note(rule, Verdict.PASS, f"the repeat answered {said(repeat)}")
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
            if moved(first, report) or report.status in FINAL or time.monotonic() >= until:
                return True

    async def _poll(self, rule: str) -> Report | None:
        """One poll of the eid, judged under ``rule``; its report, or None when it had none."""
        outcome = await self.caller.poll(self.call, self.ctx)
        if outcome.kind is OutcomeKind.REPORT:
            assert outcome.report is not None
            self.reports.append(outcome.report)
            self.polls += 1
            verdict, extra = report_warnings(outcome.report)
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
            verdict, extra = report_warnings(outcome.report)
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

    async def _batch(self) -> None:
        """One batch poll about the eid and the unknown eid, sent and read as ecron does,
        then one more poll of the eid (if polls work), so the batch report sits between
        two polls; the batch rules judge them."""
        before = list(self.reports)
        ctxs = [self.ctx, self.unknown_ctx]
        answer, outcomes = await batch_answer(self.caller, self.call, ctxs)
        polls_work = self.polls > 0 and not self.checklist.failed("poll")
        after = None
        if answer.reports is not None and polls_work:
            after = await self._poll("poll")
        judge_batch(self.checklist, answer, outcomes, before, after, bool(self.call.secret))

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
