"""Where each MCP host keeps its server list, and in what shape (the installer's table).

Owns :data:`HOSTS`: for Claude Code, Claude Desktop, Cursor, Windsurf, VS Code, Cline, Gemini
CLI and Codex CLI, the config file per platform, its format (JSON or TOML), the key that holds
the servers, the fields a stdio entry needs, and the paths whose presence means the host is
installed. Sources for every path are listed in docs/mcp.md. Paths are computed from an
explicit environment so tests can point ``HOME`` (and ``XDG_CONFIG_HOME``, ``APPDATA``,
``CODEX_HOME``) at a temporary directory. Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evermind.errors import ConfigError


@dataclass(frozen=True)
class HostEnv:
    """The environment host paths are resolved in.

    Attributes:
        home: The user's home directory.
        platform: ``sys.platform`` (``linux``, ``darwin``, ``win32``).
        env: Environment variables (``XDG_CONFIG_HOME``, ``APPDATA``, ``CODEX_HOME``).
    """

    home: Path
    platform: str
    env: Mapping[str, str]

    @classmethod
    def current(cls) -> HostEnv:
        """The running process's environment (``HOME`` honoured on every platform)."""
        env = dict(os.environ)
        home = env.get("HOME") or env.get("USERPROFILE") or str(Path.home())
        return cls(Path(home), sys.platform, env)

    def config_dir(self) -> Path:
        """The per-user application config folder (XDG on Linux, APPDATA on Windows)."""
        if self.platform == "win32":
            appdata = self.env.get("APPDATA")
            return Path(appdata) if appdata else self.home / "AppData" / "Roaming"
        if self.platform == "darwin":
            return self.home / "Library" / "Application Support"
        xdg = self.env.get("XDG_CONFIG_HOME")
        return Path(xdg) if xdg else self.home / ".config"

    def vscode_user_dir(self) -> Path:
        """VS Code's user settings folder (``Code/User`` under the config folder)."""
        return self.config_dir() / "Code" / "User"


@dataclass(frozen=True)
class HostSpec:
    """One MCP host's config file and entry shape.

    Attributes:
        name: The ``--host`` name, e.g. ``claude-code``.
        title: The product's name.
        format: ``json`` or ``toml``.
        root_key: The top-level key holding server entries by name.
        config_path: The user-level config file.
        detect: Paths whose existence means the host is installed (any one suffices).
        entry_fields: Fields a stdio entry carries besides ``command`` and ``args``.
    """

    name: str
    title: str
    format: Literal["json", "toml"]
    root_key: str
    config_path: Callable[[HostEnv], Path]
    detect: Callable[[HostEnv], list[Path]]
    entry_fields: Mapping[str, Any] = field(default_factory=dict)

    def entry(self, command: list[str]) -> dict[str, Any]:
        """The server entry this host needs to launch ``command`` over stdio."""
        return {**self.entry_fields, "command": command[0], "args": list(command[1:])}

    def is_installed(self, env: HostEnv) -> bool:
        """Whether any of the host's marker paths exists."""
        return any(path.exists() for path in self.detect(env))


def _codex_home(env: HostEnv) -> Path:
    chosen = env.env.get("CODEX_HOME")
    return Path(chosen) if chosen else env.home / ".codex"


def _cline_dir(env: HostEnv) -> Path:
    return env.vscode_user_dir() / "globalStorage" / "saoudrizwan.claude-dev"


HOSTS: tuple[HostSpec, ...] = (
    HostSpec(
        "claude-code",
        "Claude Code",
        "json",
        "mcpServers",
        lambda e: e.home / ".claude.json",
        lambda e: [e.home / ".claude.json", e.home / ".claude"],
        {"type": "stdio"},
    ),
    HostSpec(
        "claude-desktop",
        "Claude Desktop",
        "json",
        "mcpServers",
        lambda e: e.config_dir() / "Claude" / "claude_desktop_config.json",
        lambda e: [e.config_dir() / "Claude"],
    ),
    HostSpec(
        "cursor",
        "Cursor",
        "json",
        "mcpServers",
        lambda e: e.home / ".cursor" / "mcp.json",
        lambda e: [e.home / ".cursor"],
    ),
    HostSpec(
        "windsurf",
        "Windsurf",
        "json",
        "mcpServers",
        lambda e: e.home / ".codeium" / "windsurf" / "mcp_config.json",
        lambda e: [e.home / ".codeium" / "windsurf"],
    ),
    HostSpec(
        "vscode",
        "VS Code",
        "json",
        "servers",
        lambda e: e.vscode_user_dir() / "mcp.json",
        lambda e: [e.vscode_user_dir()],
        {"type": "stdio"},
    ),
    HostSpec(
        "cline",
        "Cline",
        "json",
        "mcpServers",
        lambda e: _cline_dir(e) / "settings" / "cline_mcp_settings.json",
        lambda e: [_cline_dir(e)],
        {"disabled": False},
    ),
    HostSpec(
        "gemini-cli",
        "Gemini CLI",
        "json",
        "mcpServers",
        lambda e: e.home / ".gemini" / "settings.json",
        lambda e: [e.home / ".gemini"],
    ),
    HostSpec(
        "codex",
        "Codex CLI",
        "toml",
        "mcp_servers",
        lambda e: _codex_home(e) / "config.toml",
        lambda e: [_codex_home(e)],
    ),
)

#: Other spellings accepted by ``--host``.
ALIASES = {"gemini": "gemini-cli", "codex-cli": "codex", "code": "vscode", "vs-code": "vscode"}


def select_hosts(spec: str, env: HostEnv | None = None) -> list[HostSpec]:
    """Returns the hosts ``--host`` names: ``auto`` (installed ones), ``all``, or a comma list.

    Raises:
        ConfigError: The list names an unknown host.
    """
    env = HostEnv.current() if env is None else env
    wanted = spec.strip().lower()
    if wanted == "auto":
        return [host for host in HOSTS if host.is_installed(env)]
    if wanted == "all":
        return list(HOSTS)
    by_name = {host.name: host for host in HOSTS}
    chosen: list[HostSpec] = []
    for raw in wanted.split(","):
        name = ALIASES.get(raw.strip(), raw.strip())
        if name not in by_name:
            raise ConfigError(
                f"--host: unknown MCP host {raw.strip()!r}; expected auto, all, or a comma list of "
                f"{', '.join(by_name)}"
            )
        if by_name[name] not in chosen:
            chosen.append(by_name[name])
    return chosen


__all__ = ["ALIASES", "HOSTS", "HostEnv", "HostSpec", "select_hosts"]
