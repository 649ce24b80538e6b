"""The batch rules of ``ecron check-service --batch-poll-url``: one batch poll about the
triggered eid and an eid never triggered (sent and read by ``executor/batch.py``, as the
daemon sends and reads it), judged here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ecron.cli.checklist import (
    Checklist,
    Verdict,
    report_warnings,
    restarted,
    said,
    seen,
    signing_hint,
)
from ecron.core import Report
from ecron.executor.batch import excerpt
from ecron.executor.http import CallOutcome, OutcomeKind


def judge_batch(
    checklist: Checklist,
    answer: CallOutcome,
    outcomes: Mapping[str, CallOutcome],
    before: list[Report],
    after: Report | None,
    signed: bool,
) -> None:
    """Judge the batch rules on one batch ``answer`` (and each id's outcome in it), given the
    reports of the eid ``before`` it and the poll ``after`` it (None: polls failed)."""
    if answer.reports is None:
        _answer_failed(checklist, answer, signed)
        return
    count = sum(remote_id in answer.reports for remote_id in outcomes)
    checklist.note(
        "batch-answer",
        Verdict.PASS,
        f"HTTP {answer.http_status}, reports of {count} of the {len(outcomes)} ids asked about",
    )
    report = _known(checklist, answer.reports, outcomes[checklist.eid])
    _unknown(checklist, answer.reports, outcomes[checklist.unknown_eid])
    if report is not None:
        _agrees(checklist, before, report, after)


def _answer_failed(checklist: Checklist, answer: CallOutcome, signed: bool) -> None:
    """The batch call failed as a whole: what ecron would make of that, for every id."""
    if answer.http_status == 404:
        why = (
            "the batch endpoint is missing (is --batch-poll-url right?): ecron would count a "
            "failed probe of every execution in the call, and end them FAILED unreachable"
        )
    elif answer.kind is OutcomeKind.BAD_REPORT:
        why = (
            f"{answer.detail}: ecron would count a protocol-error probe of every execution in "
            "the call (FAILED protocol_error)"
        )
    else:
        why = (
            "a failed probe of every execution in the call (after max_probe_failures in a "
            "row: FAILED unreachable)"
        )
    # seen() would call a bad answer "not a report": no batch answer is one
    what = f"HTTP {answer.http_status}" if answer.kind is OutcomeKind.BAD_REPORT else seen(answer)
    checklist.note("batch-answer", Verdict.FAIL, f"{what}: {why}{signing_hint(answer, signed)}")


def _known(checklist: Checklist, reports: Mapping[str, Any], outcome: CallOutcome) -> Report | None:
    """Judge the triggered eid's report in the answer; the report, when it is one."""
    eid, rule = checklist.eid, "batch-report"
    if outcome.kind is OutcomeKind.REPORT:
        assert outcome.report is not None
        verdict, extra = report_warnings(outcome.report)
        checklist.note(rule, verdict, f"reports[{eid}]: {said(outcome.report)}{extra}")
        return outcome.report
    lost = "ecron would end the execution FAILED lost"
    if eid not in reports:
        detail = f"the triggered eid {eid} is left out of reports: read as UNKNOWN, {lost}"
    elif outcome.kind is OutcomeKind.UNKNOWN:
        detail = f"reports[{eid}] = {_value(reports[eid])}: the service lost the eid, {lost}"
    else:
        detail = (
            f"reports[{eid}] = {_value(reports[eid])} is not a report ({outcome.detail}): "
            "ecron would count a protocol-error probe of the execution"
        )
    checklist.note(rule, Verdict.FAIL, detail)
    return None


def _unknown(checklist: Checklist, reports: Mapping[str, Any], outcome: CallOutcome) -> None:
    """Judge the answer about the eid never triggered: left out, or UNKNOWN."""
    unknown, rule = checklist.unknown_eid, "batch-unknown"
    if unknown not in reports:
        checklist.note(rule, Verdict.PASS, f"{unknown} is left out of reports")
    elif outcome.kind is OutcomeKind.UNKNOWN:
        checklist.note(rule, Verdict.PASS, f"reports[{unknown}]: UNKNOWN")
    elif outcome.kind is OutcomeKind.REPORT:
        why = (
            "the service made up a report for an eid it never saw: ecron would take work "
            "that never started for work going on"
        )
        checklist.note(
            rule, Verdict.FAIL, f"reports[{unknown}] = {_value(reports[unknown])}: {why}"
        )
    else:
        why = f"not a report ({outcome.detail}): leave an eid you do not know out, or say UNKNOWN"
        checklist.note(
            rule, Verdict.FAIL, f"reports[{unknown}] = {_value(reports[unknown])}: {why}"
        )


def _agrees(
    checklist: Checklist, before: list[Report], batch: Report, after: Report | None
) -> None:
    """Does the batch report of the eid sit between the polls before and after it?"""
    rule, last = "batch-agrees", before[-1]
    problem = restarted(before, batch)
    if problem is None and after is not None:
        problem = restarted([*before, batch], after)
    if problem is None and after is not None and batch.status not in (last.status, after.status):
        problem = "its status is neither the one before nor the one after"
    around = f"{said(last)} before it" + ("" if after is None else f", {said(after)} after it")
    if problem is not None:
        detail = f"the batch answered {said(batch)}, the polls {around}: {problem}"
        checklist.note(rule, Verdict.FAIL, detail)
    elif after is None:
        checklist.note(rule, Verdict.SKIP, "not checked: the polls failed")
    else:
        checklist.note(rule, Verdict.PASS, f"the batch answered {said(batch)}, the polls {around}")


def _value(value: Any) -> str:
    """One value of ``reports`` as JSON, cut short."""
    return excerpt(json.dumps(value, default=str).encode())
