"""Finds and launches a Chromium with WebGPU for headless use (native-only; Playwright).

Used by the browser tests, ``evermind doctor``, the benchmarks and headless training
(:mod:`evermind.studio.headless`). Playwright's own browser is used when it is installed;
otherwise a system Chromium (``EVERMIND_CHROMIUM``, then the usual names on PATH and the
usual install paths).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError

#: Flags for headless WebGPU. The resolver rule makes every host but loopback fail to
#: resolve, so nothing can leave the machine even by accident.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]

_NAMES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"]
_PATHS = [
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "C:/Program Files/Google/Chrome/Application/chrome.exe",
]


def find_chromium(playwright: Any | None = None) -> str | None:
    """Returns the Chromium executable to launch, or None for Playwright's own browser.

    Order: ``EVERMIND_CHROMIUM``; Playwright's bundled Chromium if installed; a system
    Chromium/Chrome on PATH or in the usual places.

    Raises:
        ConfigError: ``EVERMIND_CHROMIUM`` names a missing file, or no browser was found.
    """
    env = os.environ.get("EVERMIND_CHROMIUM")
    if env:
        if not Path(env).is_file():
            raise ConfigError(
                f"EVERMIND_CHROMIUM={env!r} is not a file; point it at a Chromium binary"
            )
        return env
    if playwright is not None:
        try:
            bundled = playwright.chromium.executable_path
        except Exception:  # Playwright raises when its browser was never downloaded
            bundled = ""
        if bundled and Path(bundled).is_file():
            return None
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    for path in _PATHS:
        if Path(path).is_file():
            return path
    raise ConfigError(
        "no Chromium found: install one (Debian: apt-get install chromium; or "
        "`playwright install chromium`) or set EVERMIND_CHROMIUM to its path"
    )


def launch_options(playwright: Any | None = None, headless: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``playwright.chromium.launch`` with WebGPU enabled."""
    options: dict[str, Any] = {"headless": headless, "args": list(CHROMIUM_FLAGS)}
    exe = find_chromium(playwright)
    if exe is not None:
        options["executable_path"] = exe
    return options
