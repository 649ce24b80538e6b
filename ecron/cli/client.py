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
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if method == "POST":
            data = b"" if body is None else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                answer = json.loads(body)
                message = answer.get("error", body.decode(errors="replace"))
                if answer.get("detail"):
                    message += f" ({answer['detail']})"
            except (ValueError, AttributeError):
                message = body.decode(errors="replace") or exc.reason
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
