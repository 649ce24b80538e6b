"""``api_tokens_file``: more callers from a YAML file (a mounted secret), added to
``api_tokens`` at load; each problem names the file and the entry, never a token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ecron.config.callers import ApiCaller
from ecron.config.messages import DAEMON_FILE, explain, kind


def read_callers_file(data: dict[str, Any], root: Path, problems: list[str]) -> None:
    """The callers of ``api_tokens_file`` (a path, relative to the config directory) added
    to ``api_tokens``: a YAML list of ``{name, token, role}``, or a mapping with that list
    under ``api_tokens``. Problems name the file."""
    named = data.get("api_tokens_file")
    if not isinstance(named, str) or not named.strip():
        return  # unset, or not text: validation says what is wrong
    before = len(problems)
    path = root / named
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name; or not UTF-8
        why = exc.strerror if isinstance(exc, OSError) else "not a readable name or UTF-8 text"
        problems.append(f"{DAEMON_FILE}: field 'api_tokens_file': cannot read {shown} ({why}).")
        return
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError:  # its text is secret: PyYAML would quote it
        problems.append(f"{shown}: is not YAML (write a list of {{name, token, role}}).")
        return
    if isinstance(found, dict) and set(found) == {"api_tokens"}:
        found = found["api_tokens"]
    if not isinstance(found, list):
        problems.append(f"{shown}: must hold a list of {{name, token, role}}, not {kind(found)}.")
        return
    for number, entry in enumerate(found, start=1):  # each one's problems name this file
        try:
            ApiCaller.model_validate(entry)
        except ValidationError as exc:
            for where, text in explain(exc, ApiCaller, skip=[]):
                problems.append(f"{shown}: entry {number}: field '{where or 'the entry'}': {text}")
    if len(problems) > before:
        return
    given = data.get("api_tokens") or []
    if isinstance(given, str):
        given = yaml.safe_load(given) if _is_yaml(given) else given
    data["api_tokens"] = [*given, *found] if isinstance(given, list) else given


def _is_yaml(text: str) -> bool:
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return True
