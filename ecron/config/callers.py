"""Who may call the API (DESIGN.md, "Roles"): named tokens, each with a role, and where the
daemon may listen without one.

``api_token`` alone is one caller, ``admin``; ``api_tokens`` names more (in ecron.yaml, in
``ECRON_API_TOKENS`` as a YAML or JSON list, or in the file ``api_tokens_file`` names, which
a deployment mounts from a secret). An empty token is an error, never "no token".
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The name the lone ``api_token`` goes by.
ADMIN_NAME = "admin"
CALLER_NAME = re.compile(r"[a-z0-9][a-z0-9_.@-]*")


class Role(StrEnum):
    """What a caller may do; each role may do what the ones before it may."""

    #: Every GET: tasks, executions, pools, the document, the dashboard.
    VIEWER = "viewer"
    #: Also run, backfill, cancel, resume, pause and unpause.
    OPERATOR = "operator"
    #: Also read the audit log.
    ADMIN = "admin"


#: A role's rank: a caller may do what needs its rank or less.
RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


def allows(role: Role, needed: Role) -> bool:
    """Whether a caller of ``role`` may make a call that needs ``needed``."""
    return RANK[role] >= RANK[needed]


class ApiCaller(BaseModel):
    """One caller of the API: its name (in the audit log), its bearer token, its role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(max_length=100)
    token: str
    role: Role

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not CALLER_NAME.fullmatch(value):
            raise ValueError(f"{value!r}: use lower-case letters, digits and . _ - @")
        return value

    @field_validator("token")
    @classmethod
    def _token(cls, value: str) -> str:
        return check_token(value)


def check_optional_token(value: str | None) -> str | None:
    """``api_token``: None (no token), or a token that ``check_token`` accepts."""
    return None if value is None else check_token(value)


#: The shortest token accepted: one that cannot be guessed (``openssl rand -hex 32`` makes
#: 64 characters).
MIN_TOKEN = 16
#: How to make a token, as errors say it.
MAKE_ONE = "make one with: openssl rand -hex 32"


def check_token(value: str) -> str:
    """A token is some text: an empty one (an unset variable, a secret not mounted) is an
    error, never "no token"; so is one shorter than ``MIN_TOKEN``, which could be guessed.
    No error quotes it."""
    if not value.strip():
        raise ValueError("is empty: set a token, or remove the key to have none")
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in value):
        raise ValueError("holds a space or a control character, which no header can carry")
    if len(value) < MIN_TOKEN:
        raise ValueError(
            f"is shorter than {MIN_TOKEN} characters, which could be guessed: {MAKE_ONE}"
        )
    return value


def parse_callers(value: Any) -> Any:
    """``api_tokens`` as text (``ECRON_API_TOKENS``, or the file's contents): its YAML (or
    JSON) list; anything else as it is, for validation to judge."""
    if isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError("is not a YAML or JSON list of {name, token, role}") from None
    return value


def check_callers(api_token: str | None, callers: list[ApiCaller]) -> list[ApiCaller]:
    """Every caller, ``api_token`` first as ``admin``; names and tokens each used once."""
    every = [ApiCaller(name=ADMIN_NAME, token=api_token, role=Role.ADMIN)] if api_token else []
    every += callers
    names = [caller.name for caller in every]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        also = " (api_token is the caller 'admin')" if ADMIN_NAME in twice and api_token else ""
        raise ValueError(f"api_tokens: the name {twice[0]!r} is used twice{also}")
    tokens = [caller.token for caller in every]
    if len(set(tokens)) < len(tokens):
        raise ValueError("api_tokens: two callers have the same token; give each its own")
    return every


def check_listen(listen: str, callers: list[ApiCaller], allow_unauthenticated: bool) -> None:
    """An API that asks for no token listens on a loopback address, unless that is allowed
    in so many words."""
    host = listen.rpartition(":")[0]
    if not callers and not allow_unauthenticated and not is_loopback(host):
        raise ValueError(
            f"listen: {listen!r} is reachable from other machines and no API token is set: "
            "set api_token (or api_tokens), or allow_unauthenticated: true"
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (of ``listen``) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything
