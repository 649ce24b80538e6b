"""``/``: the dashboard, one page that reads and steers ecron through the REST API.

The page holds no data of its own; its script asks the API, with the API token that it
keeps in the browser's local storage when one is saved, every two seconds (every second
on an execution's page, ``/#/executions/<eid>``). The page and its files under
``/static/`` (the files of ``ecron/api/static/``, read once at import) are served without
the token, and the page fetches nothing else: no CDN, nothing from the internet.
"""

from __future__ import annotations

from importlib import resources
from pathlib import PurePosixPath

from aiohttp import web

routes = web.RouteTableDef()

#: Where the page's scripts and style sheet are served.
STATIC = "/static/"

_KINDS = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}

#: Each file of the page by its path: (body, content type).
FILES: dict[str, tuple[bytes, str]] = {
    ("/" if entry.name == "index.html" else STATIC + entry.name): (
        entry.read_bytes(),
        _KINDS[PurePosixPath(entry.name).suffix],
    )
    for entry in resources.files("ecron.api").joinpath("static").iterdir()
    if entry.is_file() and PurePosixPath(entry.name).suffix in _KINDS
}

#: Scripts and styles from these files only (no inline script, style or handler), API
#: calls to this origin only; nothing may frame the page or send a form anywhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _answer(path: str) -> web.Response:
    if path not in FILES:
        raise web.HTTPNotFound(text=f"no dashboard file {path!r}")
    body, kind = FILES[path]
    return web.Response(
        body=body,
        content_type=kind,
        charset="utf-8",
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


@routes.get("/")
async def dashboard(_request: web.Request) -> web.Response:
    """Tasks, running executions with progress bars and ETA, history with filters, one
    execution's page (``/#/executions/<eid>``) and one task's (``/#/tasks/<name>``)."""
    return _answer("/")


@routes.get(STATIC + "{name}")
async def static_file(request: web.Request) -> web.Response:
    """One of the page's scripts or its style sheet; 404 for any other name."""
    return _answer(STATIC + request.match_info["name"])
