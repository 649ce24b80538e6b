"""Who may make which request (DESIGN.md, "Roles"), and the audit of what they asked.

One home for each rule: ``needed_role`` says what a request needs (from its method and its
route, so a new endpoint is covered the day it is added), ``Callers`` says who presents a
token, ``foreign`` says whether a request without any token configured comes from a web
page it must not (CSRF, DNS rebinding), and ``access_middleware`` applies them in that
order and records in the audit log every request that changes something and every one it
refuses (refusals counted into few entries, and an address past its bad tokens answered
429: ``limits``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from ecron.api.callers import Caller, Callers
from ecron.api.context import error
from ecron.api.dashboard import STATIC
from ecron.api.limits import MAX_BAD_TOKENS, BadTokens
from ecron.audit import AuditLog
from ecron.clock import Clock
from ecron.config.callers import Role, allows
from ecron.core.audit import ANONYMOUS, UNKNOWN

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Paths that ask for no token (the dashboard's page and files, health, metrics and the
#: OpenAPI document hold no task data or are for probes; a browser asks for the icon on
#: its own, which is not there: a 404, not a refusal in the audit log), and the prefix of
#: the dashboard's files.
DOCUMENT = "/api/v1/openapi.json"
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/favicon.ico", DOCUMENT})
OPEN_PREFIX = STATIC
#: Paths only an admin may read.
ADMIN_PATHS = frozenset({"/api/v1/audit"})
#: Methods that change nothing.
READS = frozenset({"GET", "HEAD", "OPTIONS"})


#: Where a request's caller is kept for its handler (GET /api/v1/caller).
CALLER = web.RequestKey("ecron_caller", Caller)


def is_callback(method: str, path: str) -> bool:
    """The callback (PROTOCOL.md): it takes a callback token, checked by its handler."""
    return method == "POST" and path.startswith("/api/v1/executions/") and path.endswith("/report")


def needed_role(method: str, path: str) -> Role | None:
    """The role a request needs (``path`` as routed: a template such as
    ``/api/v1/tasks/{name}/run``, or the path itself where no route matched); None for the
    open paths and the callback."""
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIX) or is_callback(method, path):
        return None
    if path in ADMIN_PATHS:
        return Role.ADMIN
    return Role.VIEWER if method in READS else Role.OPERATOR


def action_of(method: str, path: str) -> str:
    """What a request does, in the audit log: the last word of a POST's path (``run``,
    ``pause``, ``cancel``, ...), ``read`` for a read (a refused one)."""
    if method in READS:
        return "read"
    return path.rstrip("/").rpartition("/")[2] or method.lower()


class Origins:
    """Where a request may come from when no token is asked for (DESIGN.md, "Without a
    token"): a ``Host`` that is an address, ``localhost``, the listen host or
    ``public_url``'s; an ``Origin``, if sent, of the same host as the request or of
    ``public_url``."""

    def __init__(self, listen_host: str, public_url: str | None) -> None:
        public = urlsplit(public_url) if public_url else None
        self.hosts = {"localhost", listen_host.strip("[]").lower()}
        self.origins: set[str] = set()
        if public is not None and public.hostname:
            self.hosts.add(public.hostname.lower())
            self.origins.add(f"{public.scheme}://{public.netloc}".lower())

    def foreign(self, request: web.Request, *, changes: bool) -> str | None:
        """Why ``request`` (``changes``: one that changes something) may come from a page it
        must not, or None."""
        host = request.headers.get("Host", "")
        name = urlsplit(f"//{host}").hostname or ""
        if not _is_address(name) and name not in self.hosts:
            return f"the Host {host[:100]!r} is not this daemon's (set public_url to use one)"
        if not changes:
            return None
        origin = request.headers.get("Origin")
        if origin is not None:
            given = origin.lower()
            if given not in self.origins and urlsplit(given).netloc != host.lower():
                return f"the Origin {origin[:100]!r} is another site's"
        media = request.headers.get("Content-Type", "").partition(";")[0].strip().lower()
        if media != "application/json":
            return "a request that changes something must be sent as application/json"
        return None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def access_middleware(
    callers: Callers, origins: Origins, audit: AuditLog, clock: Clock, most: int = MAX_BAD_TOKENS
) -> Any:
    """Refuse what the caller may not do (401, 403; 429 to an address past its bad tokens),
    and audit the rest of what changes; refusals are counted into few entries
    (``AuditLog.refused``). ``most``: bad tokens an address may send in a minute."""
    bad_tokens = BadTokens(most)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.resource
        path = route.canonical if route is not None else request.path
        needed = needed_role(request.method, path)
        if needed is None and (callers.configured or is_callback(request.method, path)):
            return await handler(request)  # the callback, and the open paths
        now = clock.now()
        if callers.configured and (wait := bad_tokens.wait(request.remote, now)) is not None:
            why = _held(bad_tokens.most, wait)
            held = _refuse(429, "too many bad tokens from this address", why, UNKNOWN)
            held.headers["Retry-After"] = str(wait)
            _refused(audit, request, path, held, {"retry_after": wait})
            return held
        refused = _refusal(request, needed, callers, origins)
        if isinstance(refused, web.Response):
            if refused.status == 401:
                bad_tokens.bad(request.remote, now)
            _refused(audit, request, path, refused)
            return refused
        request[CALLER] = refused
        if request.method in READS or needed is None:
            return await handler(request)
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            _audit(audit, request, path, exc, actor=refused.name)
            raise
        _audit(audit, request, path, response, actor=refused.name)
        return response

    return middleware


_ACTOR = web.ResponseKey("ecron_actor", str)
#: What a handler adds to its request's audit entry (a backfill: its period, and whether it
#: was a dry run), kept on its answer.
AUDIT_DETAIL = web.ResponseKey("ecron_audit_detail", dict[str, Any])


def _refusal(
    request: web.Request, needed: Role | None, callers: Callers, origins: Origins
) -> Caller | web.Response:
    """The caller, or the answer that refuses the request (its actor kept on it)."""
    if not callers.configured:
        routed = request.match_info.http_exception is None  # a 404 or 405 changes nothing
        changes = routed and needed is not None and request.method not in READS
        why = origins.foreign(request, changes=changes)
        if why is None:
            return Caller(ANONYMOUS, Role.ADMIN)
        return _refuse(403, "refused: this request may come from another site", why, ANONYMOUS)
    caller = callers.find(request.headers.get("Authorization", ""))
    if caller is None:
        hint = "send Authorization: Bearer <token>"
        return _refuse(401, "missing or wrong API token", hint, UNKNOWN)
    if needed is not None and not allows(caller.role, needed):
        why = f"the caller {caller.name!r} has the role {caller.role}; this needs {needed} or above"
        return _refuse(403, "your role does not allow this", why, caller.name)
    return caller


def _refuse(status: int, message: str, detail: str, actor: str) -> web.Response:
    answer = error(status, message, detail)
    if status == 401:
        answer.headers["WWW-Authenticate"] = 'Bearer realm="ecron"'
    answer[_ACTOR] = actor
    return answer


def _held(most: int, wait: int) -> str:
    return (
        f"this address sent {most} missing or wrong API tokens within a minute: try again "
        f"in {wait} s, with a token that is right"
    )


def _refused(
    audit: AuditLog,
    request: web.Request,
    path: str,
    answer: web.Response,
    detail: dict[str, Any] | None = None,
) -> None:
    """A refusal in the audit log, counted with the others of its address, actor and status
    (``AuditLog.refused``)."""
    info = request.match_info
    audit.refused(
        answer[_ACTOR],
        action_of(request.method, path),
        info.get("name") or info.get("eid") or request.path,
        status=answer.status,
        remote=request.remote,
        task=info.get("name"),
        detail=detail,
    )


def _audit(
    audit: AuditLog, request: web.Request, path: str, answer: web.StreamResponse, actor: str
) -> None:
    info = request.match_info
    target = info.get("name") or info.get("eid") or request.path
    task = info.get("name") or _task_in(answer)
    audit.record(
        actor,
        action_of(request.method, path),
        target,
        task=task,
        status=answer.status,
        remote=request.remote,
        detail=answer.get(AUDIT_DETAIL),
    )


def _task_in(answer: web.StreamResponse) -> str | None:
    """The task of an execution snapshot answered (a cancel, a resume), where there is one."""
    body = getattr(answer, "body", None)
    if not isinstance(body, bytes) or not body.startswith(b"{"):
        return None
    try:
        task = orjson.loads(body).get("task")
    except orjson.JSONDecodeError:
        return None
    return task if isinstance(task, str) else None
