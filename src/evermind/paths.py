"""The per-user data directory, shared by the runtime and the MCP server (one store for both).

Browser-safe: standard library only (in the tab it is never called).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["data_dir"]


def data_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """Returns the per-user data directory of Evermind (not created).

    Linux and other Unix: ``$XDG_DATA_HOME/evermind`` (default ``~/.local/share/evermind``; a
    relative ``XDG_DATA_HOME`` is ignored, as the XDG Base Directory spec says); macOS:
    ``~/Library/Application Support/evermind``; Windows: ``%LOCALAPPDATA%\\evermind``.

    Args:
        env: The environment to read (default ``os.environ``).
        platform: ``sys.platform`` value to resolve for (default the running one).
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform == "win32":
        base = env.get("LOCALAPPDATA") or env.get("APPDATA")
        return (Path(base) if base else home / "AppData" / "Local") / "evermind"
    if platform == "darwin":
        return home / "Library" / "Application Support" / "evermind"
    xdg = env.get("XDG_DATA_HOME")
    return (
        Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "share"
    ) / "evermind"
