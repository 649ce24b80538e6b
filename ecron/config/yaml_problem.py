"""A YAML syntax error in one line that points at its real place.

PyYAML marks two places: where the thing it was reading began (its *context*: "while
scanning a quoted scalar", line 3) and where it gave up (its *problem*: "found unexpected
end of stream", at the end of the file). An unclosed quote or bracket is only found at
the end of the file, so that line says nothing; the line where it began does.
"""

from __future__ import annotations

import yaml
from yaml.error import Mark


def _at(mark: Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def yaml_problem(exc: yaml.MarkedYAMLError, text: str) -> str:
    """``line 3, column 11: the YAML cannot be read: while scanning a quoted scalar, found
    unexpected end of stream at the end of the file.`` for ``exc`` raised reading ``text``:
    led by the problem's place, or by the context's when the problem is only that the file
    ended; PyYAML's context and problem both said, each with its place where it differs."""
    problem, context = exc.problem_mark, exc.context_mark
    at_end = problem is not None and not text[problem.index :].strip()
    lead = context if context is not None and (at_end or problem is None) else problem
    parts = []
    if exc.context:
        if context is not None and context is not lead:
            parts.append(f"{exc.context} (from {_at(context)})")
        else:
            parts.append(exc.context)
    if exc.problem:
        if at_end:
            parts.append(f"{exc.problem} at the end of the file")
        elif problem is not None and problem is not lead:
            parts.append(f"{exc.problem} (at {_at(problem)})")
        else:
            parts.append(exc.problem)
    where = f"{_at(lead)}: " if lead is not None else ""
    said = ", ".join(part.rstrip(".") for part in parts) or str(exc)
    return f"{where}the YAML cannot be read: {said}."
