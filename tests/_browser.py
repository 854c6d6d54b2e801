"""Headless Chromium for the browser tests (Debian's `chromium` and `chromium-driver`, driven
with Selenium from PyPI): `browser()` starts one, or skips the test saying what is missing."""

import os
import shutil

import pytest

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
DRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def _first(paths, name):
    for p in paths:
        if os.path.exists(p):
            return p
    return shutil.which(name)


def browser(width=1400, height=1800):
    """A headless Chromium WebDriver (its browser log kept), or a skip with the reason."""
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="pip install selenium (the test extra) for browser tests")
    binary, driver = _first(CHROMIUM, "chromium"), _first(DRIVER, "chromedriver")
    if binary is None or driver is None:
        pytest.skip("browser tests need Chromium and its driver: apt-get install chromium "
                    "chromium-driver (./dev test installs them when run as root)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)
