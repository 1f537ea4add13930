"""Test helpers for web pages: headless Chromium driven by Selenium, and a plain HTTP client.

The browser is Debian's ``chromium`` with its matching ``chromium-driver`` (``/usr/bin/chromedriver``),
so nothing is downloaded at run time. Missing either fails the test with the install line: CI
installs both, and a test that silently skipped would hide a broken inbox.

Selenium calls block. A test whose server runs on the test's own event loop must call them through
``asyncio.to_thread``, or the server cannot answer the browser.
"""

from __future__ import annotations

import http.client
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from tests.helpers.support import REPO

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = REPO / "test-artifacts"


def chromium() -> Any:
    """A headless Chromium session (a Selenium ``WebDriver``); ``quit()`` it when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), (
            f"{path} is missing: apt-get install -y chromium chromium-driver (the browser tests need both)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI; the page is our own, served on loopback
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1100",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    return driver


def wait_for(driver: Any, element_id: str, within: float = 30) -> Any:
    """The element with ``element_id`` once the page that has it has loaded.

    After a click that submits a form, the old page may still be there, or half gone: wait for an
    element only the next page has, never for one both pages share.
    """
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver,
        within,
        poll_frequency=0.2,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(lambda d: d.find_element(By.ID, element_id))


def save_screenshot(driver: Any, directory: Path, name: str) -> Path:
    """A full-page PNG in ``directory``, copied to ``test-artifacts/`` at the repository root."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    # The whole page, not just the window: grow the window to the document's height first.
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 140, 6000))
    assert driver.save_screenshot(str(path)), f"Chromium took no screenshot for {name}"
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(path, ARTIFACTS / name)
    return path


@dataclass
class Reply:
    """An HTTP response, read whole."""

    status: int
    headers: dict[str, str]  # lower-case names
    body: str


def fetch(url: str, *, form: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> Reply:
    """GET ``url``, or POST ``form`` urlencoded to it; redirects are returned, not followed."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    try:
        body = urlencode(form).encode() if form is not None else None
        sent = dict(headers or {})
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("POST" if form is not None else "GET", path or "/", body=body, headers=sent)
        response = conn.getresponse()
        return Reply(
            response.status,
            {k.lower(): v for k, v in response.getheaders()},
            response.read().decode("utf-8", "replace"),
        )
    finally:
        conn.close()
