"""Header names and values of tasks, steps and webhooks, checked at load: a name is an HTTP
token (RFC 9110), a value holds no CR, LF or NUL. Such a value would otherwise pass
``ecron validate`` and then fail every call it is sent with (or, with a client that
allowed it, split the request)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

#: RFC 9110 ``token``: what a header name may be made of.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: What no header value may hold.
_BREAKS = re.compile(r"[\r\n\x00]")


def check_name(name: str) -> str:
    """A header name: one or more token characters (no space, colon, control character)."""
    if not _TOKEN.fullmatch(name):
        raise ValueError("is not a valid header name: use letters, digits and !#$%&'*+-.^_`|~ only")
    return name


def check_value(value: str) -> str:
    """A header value: no carriage return, line feed or NUL (never quoted: it is a secret)."""
    if _BREAKS.search(value):
        raise ValueError(
            "must not hold a carriage return, line feed or NUL character (check the value, "
            "or the environment variable it names)"
        )
    return value


HeaderName = Annotated[str, AfterValidator(check_name)]
HeaderValue = Annotated[str, AfterValidator(check_value)]
#: The ``headers`` of a task, a step or a webhook.
Headers = dict[HeaderName, HeaderValue]
