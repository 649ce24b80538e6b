"""A real headless Chromium for the dashboard tests: Debian's ``chromium``, driven by Selenium
through Debian's ``chromedriver`` (package ``chromium-driver``). Both are found on PATH and
named explicitly, so Selenium Manager never runs and nothing is downloaded.

Selenium blocks, and the daemon under test runs on the test's event loop: every browser
call goes through ``asyncio.to_thread`` so that the daemon keeps serving meanwhile. Waits
are Selenium's ``WebDriverWait`` on a condition, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ecron.daemon import Daemon

try:
    from selenium import webdriver
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        TimeoutException,
    )
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait
except ImportError:  # pragma: no cover - the dev extra installs it
    webdriver = None  # type: ignore[assignment]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

T = TypeVar("T")


def missing() -> str | None:
    """What this machine lacks to drive a browser, or None."""
    if webdriver is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    if CHROMIUM is None:
        return "chromium is not installed (apt-get install chromium)"
    if CHROMEDRIVER is None:
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


def require_browser() -> None:
    """Skip on a developer machine without the browser; fail in CI (CI=true)."""
    why = missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must be able to drive a browser: {why}")
    pytest.skip(why)


@contextmanager
def chromium(profile: Path) -> Iterator[WebDriver]:
    """A headless Chromium on ``profile``, quit at the end."""
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for console_errors()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager, were it ever run: no downloads
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def browser_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A headless Chromium for the tests of one file (a module-scoped ``driver`` fixture
    yields from it; each test opens its own daemon's page, with local storage emptied)."""
    require_browser()
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as browser:
        yield browser


def dashboard(driver: WebDriver, daemon: Daemon) -> Page:
    """The dashboard of ``daemon`` in ``driver``."""
    return Page(driver, f"http://127.0.0.1:{daemon.port}")


class Page:
    """The dashboard of one daemon in the browser, with waits that leave the loop free."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.driver = driver
        self.base = base

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run a blocking browser call in a thread."""
        return await asyncio.to_thread(function, *args)

    async def open(self, fragment: str = "#/") -> None:
        """Load the page afresh at ``fragment``, with nothing kept in local storage (and
        what pages before it logged forgotten)."""
        await self.call(self.driver.get, f"{self.base}/")
        await self.call(self.driver.execute_script, "localStorage.clear()")
        await self.call(self.driver.get_log, "browser")
        await self.call(self.driver.get, f"{self.base}/{fragment}")

    async def wait(self, condition: Callable[[WebDriver], T], what: str, timeout: float = 8) -> T:
        """Until ``condition(driver)`` is truthy (its value), or fail naming ``what``."""
        waiting = WebDriverWait(
            self.driver,
            timeout,
            poll_frequency=0.05,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        )
        try:
            return await self.call(waiting.until, condition)
        except TimeoutException as exc:
            text = await self.call(lambda: self.driver.find_element(By.TAG_NAME, "body").text)
            raise AssertionError(f"{what}: not within {timeout}s; the page shows:\n{text}") from exc

    async def element(self, css: str, what: str | None = None) -> WebElement:
        """The element at ``css``, once it is shown."""
        return await self.wait(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, css)), what or css
        )

    async def text(self, css: str) -> str:
        """The text shown by the element at ``css`` (empty when there is none)."""

        def read() -> str:
            found = self.driver.find_elements(By.CSS_SELECTOR, css)
            return found[0].text if found else ""

        return await self.call(read)

    async def wait_text(self, css: str, predicate: Callable[[str], bool], what: str) -> str:
        """Until the element at ``css`` shows a text that ``predicate`` accepts (that text)."""

        def check(driver: WebDriver) -> str | None:
            text = driver.find_element(By.CSS_SELECTOR, css).text
            return text if predicate(text) else None

        found: str = await self.wait(check, what)
        return found

    async def click(self, css: str, what: str | None = None) -> None:
        """Click the button or link at ``css`` once it can be clicked."""
        found = await self.wait(
            expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, css)), what or css
        )
        await self.call(found.click)

    async def accept_confirm(self) -> str:
        """Accept the confirm() dialog that opens; its text."""
        alert = await self.wait(expected_conditions.alert_is_present(), "a confirm dialog")
        text = alert.text
        await self.call(alert.accept)
        return text

    async def choose(self, css: str, value: str) -> None:
        """Pick the option of value ``value`` in the select at ``css`` (once it has one)."""

        def pick(driver: WebDriver) -> bool:
            Select(driver.find_element(By.CSS_SELECTOR, css)).select_by_value(value)
            return True

        await self.wait(pick, f"option {value!r} of {css}")

    async def wait_rows(self, css: str, keys: list[str], what: str) -> None:
        """Until the rows of the table at ``css`` are those of ``keys`` (``data-key``), in
        that order."""
        script = (
            "return [...document.querySelectorAll(arguments[0] + ' tbody tr[data-key]')]"
            ".map(row => row.dataset.key)"
        )
        await self.wait(lambda driver: driver.execute_script(script, css) == keys, what)

    async def type(self, css: str, text: str) -> None:
        """Type ``text`` into the field at ``css`` (emptied first)."""
        field = await self.element(css)
        await self.call(field.clear)
        await self.call(field.send_keys, text)

    async def number(self, css: str, attribute: str) -> float:
        """A number attribute of the element at ``css`` (such as ``aria-valuenow``)."""
        found = await self.element(css)
        value = await self.call(found.get_attribute, attribute)
        assert value is not None, f"{css} has no {attribute}"
        return float(value)

    async def script(self, source: str, *args: Any) -> Any:
        """Run ``source`` in the page (``return`` gives its value back)."""
        return await self.call(self.driver.execute_script, source, *args)

    async def console_errors(self) -> list[str]:
        """The errors the page logged since the last call (script errors, CSP refusals,
        failed loads), leaving out the browser's own request for /favicon.ico."""
        entries = await self.call(self.driver.get_log, "browser")
        return [
            entry["message"]
            for entry in entries
            if entry["level"] == "SEVERE" and "/favicon.ico" not in entry["message"]
        ]

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the window at ``path``."""
        saved = await self.call(self.driver.save_screenshot, str(path))
        assert saved, f"could not save a screenshot at {path}"
        return path
