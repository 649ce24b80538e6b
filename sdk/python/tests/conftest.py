"""The kit's test fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client, closed at the end."""
    async with aiohttp.ClientSession() as session:
        yield session
