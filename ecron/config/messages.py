"""The loader's messages: a pydantic validation error as one sentence per field, each with
the field's dotted path (list positions counting from 1, like step numbers)."""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

#: (field path, what is wrong)
Problems = list[tuple[str, str]]
#: The daemon's own file in a config directory, as problems name it.
DAEMON_FILE = "ecron.yaml"
#: Fields whose values are secrets: a problem with one never quotes the value. A caller
#: entry as a whole is one too (``api_tokens[2]``: a bare token written where ``{name,
#: token, role}`` belongs), and so is a ``token`` (of a caller in a tokens file).
SECRET_PATH = re.compile(
    r"(^|\.)(secret|api_token|api_tokens|token)$|(^|\.)api_tokens\[\d+\](\.token)?$"
    r"|(^|\.)headers(\.|\[|$)|webhooks\[\d+\]\.url$"
)
#: How a secret value is shown in a problem.
HIDDEN = "***"


def explain(exc: ValidationError, model: type[BaseModel], skip: list[str]) -> Problems:
    """(field path, sentence) for each error, leaving out fields under a path in ``skip``."""
    found: Problems = []
    for error in exc.errors():
        path, owner = _walk(model, error["loc"])
        value = error.get("input")
        text = error["msg"].removeprefix("Value error, ")
        prefixed = re.match(r"([\w./\[\]]+): (.*)", text, re.DOTALL)
        if error["type"] == "value_error" and prefixed:
            inner = prefixed.group(1)
            if not path or (isinstance(value, dict) and inner in value):
                path, text = join(path, inner), prefixed.group(2)
        if SECRET_PATH.search(path):  # never quoted, not even in a validator's own words
            text = text.replace(repr(value), HIDDEN) if isinstance(value, str) else text
            shown = HIDDEN
        else:
            shown = _show(value)
        text = _sentence(error["type"], text, shown, owner, path)
        if not any(_under(path, prefix) for prefix in skip) and (path, text) not in found:
            found.append((path, text))
    return found


def _sentence(kind: str, text: str, shown: str, owner: type[BaseModel] | None, path: str) -> str:
    """The problem in words; ``shown``: the value as a problem may quote it."""
    if kind == "missing":
        return "is required but not set."
    if kind == "extra_forbidden":
        key = path.rpartition(".")[2]
        close = difflib.get_close_matches(key, list(owner.model_fields) if owner else [], n=1)
        return "is not a known key" + (f"; did you mean {close[0]!r}?" if close else ".")
    if kind == "literal_error":
        return f"{shown} is not allowed: use {text.removeprefix('Input should be ')}."
    if kind != "value_error":
        text = f"{shown} is not valid: {text[:1].lower()}{text[1:]}"
    elif text.startswith("must "):
        text = f"{shown} {text}"
    return text if text.endswith((".", "?")) else text + "."


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, type[BaseModel] | None]:
    """The dotted path of a pydantic location (union tags left out) and the model of its key."""
    path, current, owner = "", typing.cast(Any, model), None
    for item in loc:
        if item == "[key]":  # a mapping's key is at fault: the path names it already
            continue
        args = [arg for arg in typing.get_args(current) if arg is not type(None)]
        if typing.get_origin(current) in (typing.Union, types.UnionType):
            if len(args) > 1:  # ``item`` names the union member that failed
                current = None
                continue
            current = args[0]
            args = list(typing.get_args(current))
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(item))
            owner, current = current, (field.annotation if field else None)
        else:
            owner = None
            is_container = typing.get_origin(current) in (list, dict)
            current = args[-1] if is_container and args else None
        path = join(path, item)
    return path, owner


def join(path: str, item: int | str) -> str:
    if isinstance(item, int):
        return f"{path}[{item + 1}]"
    return f"{path}.{item}" if path else item


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def kind(value: Any) -> str:
    if value is None:
        return "empty"
    names = {list: "a list", dict: "a mapping", str: "a string", bool: "a boolean"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a scalar")
