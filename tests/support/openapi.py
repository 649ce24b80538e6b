"""Checking real answers against the OpenAPI document the daemon serves."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from jsonschema import Draft202012Validator

from ecron.api.context import ApiContext
from ecron.daemon import Daemon

#: The API token of the daemons these tests start, and the header that carries it.
TOKEN = "t0k-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def api_context(daemon: Daemon) -> ApiContext:
    """The parts of a running daemon, as its API application is given them."""
    return ApiContext(
        store=daemon.store,
        commands=daemon.parts.commands,
        settings=daemon.settings,
        clock=daemon.clock,
        node_id=daemon.node_id,
        callback_secret=daemon.callback_secret,
        metrics=daemon.metrics,
        last_tick=lambda: daemon.scheduler.last_tick,
        load=daemon.engine.load,
        answered=daemon.engine.answered,
        audit=daemon.audit,
        callers=daemon.callers,
        held=daemon.parts.held,
    )


async def served_document(daemon: Daemon) -> dict[str, Any]:
    """The document as the daemon serves it, fetched without any token."""
    url = f"http://127.0.0.1:{daemon.port}/api/v1/openapi.json"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        document: dict[str, Any] = await response.json()
        return document


def problems(
    document: dict[str, Any],
    method: str,
    path: str,
    status: int,
    content_type: str,
    body: Any,
) -> list[str]:
    """Where an answer (``body`` decoded from JSON, or text) differs from what the document
    says of ``method path`` answering ``status``: an empty list when it matches."""
    operation = document["paths"].get(path, {}).get(method.lower())
    if operation is None:
        return [f"{method} {path} is not in the document"]
    answer = operation["responses"].get(str(status))
    if answer is None:
        return [f"{method} {path}: status {status} is not documented"]
    media = content_type.split(";")[0].strip()
    if media not in answer["content"]:
        return [f"{method} {path} {status}: content type {media} is not documented"]
    schema = {**answer["content"][media]["schema"], "components": document["components"]}
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return [
        f"{method} {path} {status}: at {'/'.join(map(str, error.absolute_path)) or 'the top'}: "
        f"{error.message}"
        for error in validator.iter_errors(body)
    ]


class Recorder:
    """Sends requests to a daemon and checks each answer against the served document."""

    def __init__(self, daemon: Daemon, document: dict[str, Any]) -> None:
        self.base = f"http://127.0.0.1:{daemon.port}"
        self.document = document
        self.seen: list[tuple[str, str, int]] = []
        self.problems: list[str] = []

    async def send(
        self, method: str, template: str, path: str | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        """``method`` on ``path`` (``template`` filled in), with the API token unless other
        headers are given; the status and the body, after checking them."""
        kwargs.setdefault("headers", AUTH)
        if method == "POST" and "data" not in kwargs:
            kwargs.setdefault("json", {})  # what changes something is sent as JSON
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.base + (path or template), **kwargs) as response,
        ):
            text = await response.text()
            media = response.headers.get("Content-Type", "")
            body = json.loads(text) if media.startswith("application/json") else text
            self.seen.append((method, template, response.status))
            self.problems += problems(self.document, method, template, response.status, media, body)
            return response.status, body
