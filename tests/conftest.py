"""Tests are grouped by the package they test (tests/replication, tests/checkers, ...).

This file puts tests/ on sys.path, so helpers shared across groups live in tests/support/."""

from support.browser import browser  # noqa: E402, F401 (the headless Chromium fixture)
from support.users import attacker, shared_tmp  # noqa: E402, F401 (an unprivileged user, a /tmp)
