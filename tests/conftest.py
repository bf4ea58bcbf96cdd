"""Tests are grouped by the package they test (tests/replication, tests/checkers, ...).

This file puts tests/ on sys.path, so helpers shared across groups live in tests/support/."""

import pytest
from support.browser import browser  # noqa: E402, F401 (the headless Chromium fixture)
from support.tools import PARTS, skip_reason  # noqa: E402
from support.users import attacker, shared_tmp  # noqa: E402, F401 (an unprivileged user, a /tmp)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test of a part `make bootstrap` left out, saying so (tests/support/tools.py)."""
    for part in PARTS:
        if item.get_closest_marker(part) is not None and (why := skip_reason(part)):
            pytest.skip(why)
