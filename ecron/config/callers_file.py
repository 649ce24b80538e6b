"""``api_tokens_file``: more callers from a YAML file (a mounted secret), added to
``api_tokens`` at load and at each reload; each problem names the file and the entry, never
a token. A file every user of the machine may write is refused: any of them could add a
caller."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ecron.config.callers import ApiCaller
from ecron.config.messages import DAEMON_FILE, HIDDEN, explain, kind


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
    text = _read(path, problems)
    if text is None:
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
                if not where:  # the entry itself is wrong: a bare token, say; never quoted
                    text = f"{HIDDEN} is not a caller: write each as {{name, token, role}}."
                problems.append(f"{shown}: entry {number}: field '{where or 'the entry'}': {text}")
    if len(problems) > before:
        return
    given = data.get("api_tokens") or []
    if isinstance(given, str):
        given = yaml.safe_load(given) if _is_yaml(given) else given
    data["api_tokens"] = [*given, *found] if isinstance(given, list) else given


def _read(path: Path, problems: list[str]) -> str | None:
    """The file's text; None, with the problem said, when it cannot be read or when every
    user of the machine may write it (any of them could add an admin of their own)."""
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name; or not UTF-8
        why = exc.strerror if isinstance(exc, OSError) else "not a readable name or UTF-8 text"
        problems.append(f"{DAEMON_FILE}: field 'api_tokens_file': cannot read {shown} ({why}).")
        return None
    if mode & stat.S_IWOTH:
        problems.append(
            f"{shown}: is writable by every user of this machine (mode {mode & 0o777:o}), who "
            f"could add an admin of their own: chmod o-w {shown}."
        )
        return None
    return text


def _is_yaml(text: str) -> bool:
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return True
