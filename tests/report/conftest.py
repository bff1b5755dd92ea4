"""The browser the report's page tests share: one Chromium per test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .chromium import CHROMIUM, FLAGS


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield chromium
        chromium.close()
