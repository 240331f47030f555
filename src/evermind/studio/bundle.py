"""Finds the built Studio bundle, building ``dist/web`` first in a checkout (native-only).

Used by ``evermind studio``, ``evermind bench`` and headless training.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evermind.errors import BundleError

#: The checkout this package runs from (src/evermind/studio/bundle.py -> the root).
CHECKOUT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = CHECKOUT / "build" / "build_web.py"
DEFAULT_BUNDLE = CHECKOUT / "dist" / "web"


def ensure_bundle(directory: Path | None = None) -> Path:
    """Returns the bundle folder, building ``dist/web`` first when it is stale.

    Args:
        directory: A built bundle to use instead of the checkout's ``dist/web``.

    Raises:
        BundleError: No bundle exists and it cannot be built here.
    """
    if directory is not None:
        if not (directory / "index.html").is_file():
            raise BundleError(f"{directory} has no index.html; is it a built Studio bundle?")
        return directory
    if BUILD_SCRIPT.is_file():
        result = subprocess.run([sys.executable, str(BUILD_SCRIPT)], check=False)
        if result.returncode != 0:
            raise BundleError(f"building the bundle failed (exit {result.returncode}); see above")
    if not (DEFAULT_BUNDLE / "index.html").is_file():
        raise BundleError(
            f"no Studio bundle at {DEFAULT_BUNDLE}; run `make bundle` in a checkout or pass --dir"
        )
    return DEFAULT_BUNDLE


def bundle_is_current() -> bool:
    """Whether ``dist/web`` is up to date with its inputs (``build_web.py --check``)."""
    result = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--check"], capture_output=True, check=False
    )
    return result.returncode == 0
