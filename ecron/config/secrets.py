"""Passwords in URLs, and the values of query keys named like secrets (``?api_key=...``):
hidden when a URL is shown, and found for the log scrubber."""

from __future__ import annotations

import re
from urllib.parse import unquote

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


#: A query key whose value is a secret: any key that holds one of these words.
SECRET_KEY = re.compile(
    r"token|secret|signature|sig|password|passwd|pwd|auth|key|credential|session", re.I
)
#: A query parameter of a URL in a text: its key (with the ``?`` or ``&`` before it) and
#: its value.
_PARAMETER = re.compile(r"([?&;]([^=&#\s'\"]*)=)([^&#;\s'\"]*)")


def without_url_secrets(text: str) -> str:
    """``text`` (a URL, or a text quoting URLs) with each URL's password and the value of
    each query key named like a secret (``api_key``, ``token``, ``sig``) written ``***``."""
    text = without_passwords(text)
    if "=" not in text:
        return text

    def hidden(match: re.Match[str]) -> str:
        if not match.group(3) or not SECRET_KEY.search(match.group(2)):
            return match.group(0)
        return match.group(1) + "***"

    return _PARAMETER.sub(hidden, text)


def url_secrets(url: str | None) -> list[str]:
    """The secrets of ``url``: its password (as written and percent-decoded) and the values
    of its query keys named like secrets, for the log scrubber."""
    if not url:
        return []
    found = []
    password = _USERINFO_PASSWORD.search(url)
    if password is not None:
        found += [password.group(1), unquote(password.group(1))]
    for match in _PARAMETER.finditer(url):
        if match.group(3) and SECRET_KEY.search(match.group(2)):
            found += [match.group(3), unquote(match.group(3))]
    return found


_USERINFO_PASSWORD = re.compile(r"://[^\s:/@'\"]*:([^\s'\"@/]*)@")
