"""The WSGI adapter: ``service.wsgi()`` under any WSGI server (gunicorn, wsgiref, Flask's
own), or mounted in Flask with werkzeug's ``DispatcherMiddleware``. A WSGI server has no
shutdown hook: SIGTERM is what stops the service (see ``stopping``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ecron_service.protocol import JSON_TYPE, MAX_BODY, Call, error, not_found, route

if TYPE_CHECKING:
    from ecron_service.service import Service

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    429: "Too Many Requests",
    503: "Service Unavailable",
}
#: Characters a path keeps as they are when it is quoted again (RFC 3986 pchar and "/").
_SAFE = "/:@!$&'()*+,;=-._~"


def wsgi_app(service: Service) -> WSGIApp:
    """``service`` as a WSGI application."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or "/"
        routed = route(path)
        if routed is None:
            return _respond(start_response, not_found(path).status, not_found(path).body, ())
        body = _body(environ)
        if body is None:
            too_big = error(413, f"the body is over {MAX_BODY} bytes")
            return _respond(start_response, too_big.status, too_big.body, ())
        query = environ.get("QUERY_STRING", "")
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        call = Call(
            environ["REQUEST_METHOD"].upper(),
            routed[0],
            routed[1],
            _target(environ, path, query),
            query,
            headers,
            body,
        )
        answer = service.handle(call)
        return _respond(start_response, answer.status, answer.body, answer.headers)

    return app


def _target(environ: dict[str, Any], path: str, query: str) -> str:
    """The request target as sent: the server's raw one where it gives it (gunicorn's
    ``RAW_URI``, ``REQUEST_URI``), else the script name and path quoted again."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        return str(raw)
    # PEP 3333: PATH_INFO holds the decoded bytes as latin-1 characters.
    whole = (environ.get("SCRIPT_NAME", "") + path).encode("latin-1")
    return quote(whole, safe=_SAFE) + (f"?{query}" if query else "")


def _body(environ: dict[str, Any]) -> bytes | None:
    """The request's body (None past ``MAX_BODY``)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        return None
    return environ["wsgi.input"].read(length) if length > 0 else b""


def _respond(
    start_response: StartResponse, status: int, body: bytes, extra: tuple[tuple[str, str], ...]
) -> list[bytes]:
    headers = [("Content-Type", JSON_TYPE), ("Content-Length", str(len(body))), *extra]
    start_response(f"{status} {_REASONS.get(status, 'Unknown')}", headers)
    return [body]
