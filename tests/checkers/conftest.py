"""Fixtures of the checker tests: one Spark session, started only by the tests that ask for it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from checkers.spark import get_session

    session = get_session("local[2]", shuffle_partitions=4, driver_memory="1g")
    yield session
    session.stop()
