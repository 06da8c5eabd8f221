"""Headless Chromium (the Debian package) driven by Selenium, for the page tests and benchmark."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


def chromium_paths() -> tuple[str, str] | None:
    """(browser, chromedriver) when both are installed, else None."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def start_browser(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium WebDriver; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = chromium_paths()
    if paths is None:
        raise RuntimeError("chromium and chromedriver are not installed "
                           "(apt-get install -y chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = paths[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={width},{height}", "--allow-file-access-from-files"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(paths[1], log_output=os.devnull), options=opts)


def page_url(index_html: Path, fragment: str = "") -> str:
    return index_html.resolve().as_uri() + (f"#{fragment}" if fragment else "")
