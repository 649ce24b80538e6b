"""Passwords in URLs: hidden when a URL is shown, and found for the log scrubber."""

from __future__ import annotations

import re

#: The password of a database URL: between ``scheme://user:`` and the last ``@``.
_PASSWORD = re.compile(r"(://[^:/@]*:)(.*)@")


def without_password(url: str) -> str:
    """``url`` with its password, if it has one, written ``***``."""
    return _PASSWORD.sub(r"\1***@", url, count=1)


def database_password(url: str) -> str | None:
    """The password in a database URL, as written, or None."""
    found = _PASSWORD.search(url)
    return None if found is None else found.group(2)
