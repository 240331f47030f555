"""Finds and loads the WGSL shaders shipped with Evermind.

Shaders live in the repository's top-level ``shaders/`` folder. The wheel carries them as
package data under ``evermind/shaders`` (that is how they reach Pyodide); an editable
checkout reads them from the repository directly. This module is the one loader.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from evermind.errors import BundleError, ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def shader_dir() -> Path:
    """Returns the folder holding the ``*.wgsl`` files.

    Raises:
        BundleError: Neither the packaged copy nor the repository copy exists.
    """
    packaged = Path(__file__).resolve().parent.parent / "shaders"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "shaders"
    if checkout.is_dir():
        return checkout
    raise BundleError(
        f"no shaders found: looked in {packaged} (installed wheel) and {checkout} (checkout); "
        "reinstall evermind-memory or run from a full checkout"
    )


def shader_names() -> list[str]:
    """Lists the shader names (file stems) available, sorted."""
    return sorted(p.stem for p in shader_dir().glob("*.wgsl"))


@cache
def load_shader(name: str) -> str:
    """Returns the WGSL source of ``shaders/<name>.wgsl``.

    Args:
        name: The shader's name without extension, e.g. ``"elementwise"``.

    Raises:
        ConfigError: The name is not a plain lowercase identifier or no such shader exists.
    """
    if not _NAME.match(name):
        raise ConfigError(
            f"shader name {name!r} is not a plain identifier; expected e.g. 'elementwise' "
            "(no path separators, no extension)"
        )
    path = shader_dir() / f"{name}.wgsl"
    if not path.is_file():
        known = ", ".join(shader_names()) or "none"
        raise ConfigError(f"no shader named {name!r} in {path.parent}; available: {known}")
    return path.read_text(encoding="utf-8")
