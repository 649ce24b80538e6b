"""``/``: the dashboard, one page that reads and steers ecron through the REST API.

The page holds no data of its own; it asks the API (with the API token, which it keeps
in the browser's local storage when one is needed) every two seconds.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

routes = web.RouteTableDef()

_PAGE = resources.files("ecron.api").joinpath("dashboard.html").read_bytes()


@routes.get("/")
async def dashboard(_request: web.Request) -> web.Response:
    """Tasks, running executions with progress bars and ETA, and history."""
    return web.Response(
        body=_PAGE,
        content_type="text/html",
        charset="utf-8",
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline' 'self'; "
            "style-src 'unsafe-inline'",
        },
    )
