"""Fixtures of the chaos tests: the warm forkserver their nodes are forked from, and a fresh
PostgreSQL database of the session's server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.launcher import warm_up
from tests.support.postgres import PostgresServer


@pytest.fixture(scope="session")
def warm_forkserver() -> None:
    """The forkserver that the nodes are forked from, with ecron imported once."""
    warm_up()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the nodes of one test."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)
