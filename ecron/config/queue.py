"""The Redis Streams report channel's settings (``queue`` in ecron.yaml)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ecron.config.secrets import without_password
from ecron.durations import Duration


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than zero")
    return value


class QueueSettings(BaseModel):
    """The Redis Streams report channel (PROTOCOL.md, "Reports through a message queue")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    stream: str = Field(default="ecron-reports", min_length=1)
    group: str = Field(default="ecron", min_length=1)
    #: A message left pending this long by a node (that died) is claimed by another.
    claim_idle: Duration = timedelta(seconds=30)
    #: True: ``/readyz`` answers 503 while Redis cannot be read.
    required: bool = False

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            shown = without_password(value)
            raise ValueError(f"{shown!r}: use redis://HOST:PORT/DB (or rediss://, unix://)")
        return value

    _claim_idle = field_validator("claim_idle")(_positive)
