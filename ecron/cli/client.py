"""A small client of the REST API for the CLI (standard library HTTP, JSON in and out)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ecron.errors import EcronError


class ApiError(EcronError):
    """The API answered with an error, or could not be reached."""

    def __init__(self, status: int | None, message: str) -> None:
        self.status = status
        super().__init__(message)


def segment(text: str) -> str:
    """``text`` as one segment of a URL path (a name or an id as typed: quoted)."""
    return urllib.parse.quote(text, safe="")


class ApiClient:
    """Calls ``/api/v1`` of a running daemon."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None
    ) -> tuple[int, Any]:
        """Send one request; the status and the decoded JSON answer. Errors raise ``ApiError``."""
        url = self.base_url + path
        if query:
            given = {k: v for k, v in query.items() if v is not None}
            url += "?" + urllib.parse.urlencode(given, doseq=True)  # a list: the key per item
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if method == "POST":
            data = b"" if body is None else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        except ValueError as exc:
            raise ApiError(None, f"{self.base_url!r} is not a URL like http://HOST:PORT") from exc
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status, raw = response.status, response.read()
            return status, json.loads(raw or b"null")
        except ValueError as exc:  # a 2xx that is not JSON: not ecron's API
            raise ApiError(
                None, f"{method} {path}: the answer of {self.base_url} is not JSON; is it ecron?"
            ) from exc
        except urllib.error.HTTPError as exc:
            message = error_text(exc.read(), exc.reason)
            raise ApiError(exc.code, f"{method} {path}: {exc.code} {message}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(
                None, f"cannot reach ecron at {self.base_url}: {exc}; is `ecron run` going?"
            ) from exc

    def get(self, path: str, **query: Any) -> Any:
        """GET and return the JSON answer."""
        return self.request("GET", path, query)[1]

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        """POST (with an optional JSON body) and return the status and JSON answer."""
        return self.request("POST", path, body=body)


def error_text(body: bytes, reason: str) -> str:
    """An error answer in one line: its ``error``, and its ``detail`` where that adds
    something (the candidates of an ambiguous id; not the snapshot of a 409, whose error
    already names the execution and its status)."""
    try:
        answer = json.loads(body)
        message = str(answer["error"])
        detail = answer.get("detail")
    except (ValueError, TypeError, KeyError):
        message, detail = body.decode(errors="replace") or reason, None
    if isinstance(detail, list) and detail and all(isinstance(d, dict) for d in detail):
        message += ": " + ", ".join(
            f"{d.get('id')} ({d.get('task')}, {d.get('status')})" for d in detail
        )
    elif isinstance(detail, list) and detail:
        message += f" ({', '.join(map(str, detail))})"
    elif detail not in (None, "") and not isinstance(detail, dict):
        message += f" ({detail})"
    return " ".join(message.split())
