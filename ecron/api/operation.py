"""What the OpenAPI document says of one operation (``Operation``), and the parts operations
are made of (security requirements, parameters): the data ``openapi.OPERATIONS`` is written
in, apart from the list itself and from how the document is put together."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

JSON = "application/json"
#: Security requirements: the API token, nothing, or a callback token.
API_TOKEN: list[dict[str, list[str]]] = [{"apiToken": []}]
NO_TOKEN: list[dict[str, list[str]]] = []
CALLBACK_TOKEN: list[dict[str, list[str]]] = [{"callbackToken": []}]

#: An answer: a model (JSON) or a media type with a plain schema, and when it is given.
Answer = tuple[type[BaseModel] | tuple[str, dict[str, Any]], str]


@dataclass(frozen=True, slots=True)
class Operation:
    """One method on one path, as the document describes it."""

    method: str
    path: str
    tag: str
    summary: str
    description: str
    answers: dict[int, Answer]
    parameters: tuple[dict[str, Any], ...] = ()
    #: The request body's model, and whether a body is required.
    body: tuple[type[BaseModel], bool] | None = None
    security: list[dict[str, list[str]]] = field(default_factory=lambda: API_TOKEN)


def path_parameter(name: str, description: str, **schema: Any) -> dict[str, Any]:
    """A required path parameter: text, with further ``schema`` keys."""
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", **schema},
    }


def query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An optional query parameter of ``schema``."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }
