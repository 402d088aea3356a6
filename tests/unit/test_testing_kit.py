"""busguard.testing is public: its documented example must run as written."""

from __future__ import annotations

import doctest

import busguard.testing


def test_the_testing_kit_examples_run() -> None:
    result = doctest.testmod(busguard.testing)
    assert result.attempted >= 2 and result.failed == 0
