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


#: The password of any URL in a text: ``scheme://user:`` up to the ``@`` (within a word).
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)[^\s'\"]*@")


def without_passwords(text: str) -> str:
    """``text`` (a config problem, which may quote a task's URL) with the password of each
    URL in it written ``***``."""
    return _USERINFO.sub(r"\1***@", text)
