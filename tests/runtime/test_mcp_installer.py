"""``evermind install-mcp`` over a temporary home directory, for every MCP host.

Each host gets: a fresh install, an idempotent re-run (byte-identical, no backup), an update
of an existing config (other content kept, ``.bak`` holds the old bytes), an invalid config
left untouched and reported, and an uninstall. One end-to-end test runs the real CLI for all
hosts and then starts the exact command written into a host's config with the SDK client.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from evermind.mcp.hosts import HOSTS, HostEnv, HostSpec, select_hosts
from evermind.mcp.installer import install, server_command, uninstall
from tests import procs

HOST_IDS = [host.name for host in HOSTS]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostEnv:
    """A temporary home directory with HOME, XDG and APPDATA pointing into it."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("HOME", str(root))
    monkeypatch.setenv("USERPROFILE", str(root))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(root / ".local" / "share"))
    monkeypatch.setenv("APPDATA", str(root / "AppData" / "Roaming"))
    monkeypatch.setenv("LOCALAPPDATA", str(root / "AppData" / "Local"))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("EVERMIND_MEMORY_FILE", raising=False)
    monkeypatch.delenv("EVERMIND_MODEL", raising=False)
    return HostEnv.current()


def read_config(host: HostSpec, path: Path) -> dict[str, Any]:
    """The parsed config file."""
    text = path.read_text(encoding="utf-8")
    return tomllib.loads(text) if host.format == "toml" else json.loads(text)


def entry_of(host: HostSpec, path: Path, name: str = "evermind") -> dict[str, Any] | None:
    """The server entry ``name`` in the host's config, or None."""
    servers: dict[str, Any] = read_config(host, path).get(host.root_key, {})
    return servers.get(name)


def command_for(home: HostEnv, *extra: str) -> list[str]:
    """The command the installer writes, for a memory file inside ``home``."""
    return server_command(str(home.home / "memory.db"), None, "--readonly" in extra)


@pytest.mark.parametrize("host", HOSTS, ids=HOST_IDS)
def test_fresh_install_and_idempotent_rerun(host: HostSpec, home: HostEnv) -> None:
    command = command_for(home)
    (result,) = install([host], command, env=home)
    path = host.config_path(home)
    assert result.action == "created" and result.path == path and path.is_file()
    assert str(path).startswith(str(home.home))
    entry = entry_of(host, path)
    assert entry is not None
    assert entry["command"] == command[0] and entry["args"] == command[1:]
    assert entry["args"][-2:] == ["--memory-file", str(home.home / "memory.db")]
    assert not path.with_name(path.name + ".bak").exists()

    before = path.read_bytes()
    stamp = path.stat().st_mtime_ns
    (again,) = install([host], command, env=home)
    assert again.action == "unchanged"
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stamp
    assert not path.with_name(path.name + ".bak").exists()


def existing_config(host: HostSpec, stale_args: list[str]) -> str:
    """A config the user already had: another server, an unrelated setting, a stale entry."""
    if host.format == "toml":
        return (
            "# my Codex settings\n"
            'model = "o4-mini"\n\n'
            "[mcp_servers.github]\n"
            'command = "npx"\n'
            'args = ["-y", "github-mcp"]\n\n'
            "[mcp_servers.evermind]\n"
            'command = "/old/evermind"\n'
            f"args = {json.dumps(stale_args)}\n"
            "startup_timeout_sec = 20\n"
        )
    doc = {
        "theme": "dark",
        host.root_key: {
            "github": {"command": "npx", "args": ["-y", "github-mcp"]},
            "evermind": {"command": "/old/evermind", "args": stale_args, "autoApprove": ["x"]},
        },
    }
    return json.dumps(doc, indent=4) + "\n"


@pytest.mark.parametrize("host", HOSTS, ids=HOST_IDS)
def test_update_keeps_other_content_and_backs_up(host: HostSpec, home: HostEnv) -> None:
    path = host.config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    original = existing_config(host, ["mcp", "--memory-file", "/old/memory.db"])
    path.write_text(original, encoding="utf-8")

    command = server_command(str(home.home / "memory.db"), None, True)
    (result,) = install([host], command, env=home)
    assert result.action == "updated"
    assert path.with_name(path.name + ".bak").read_text(encoding="utf-8") == original
    config = read_config(host, path)
    servers = config[host.root_key]
    assert servers["github"] == {"command": "npx", "args": ["-y", "github-mcp"]}
    assert servers["evermind"]["command"] == command[0]
    assert servers["evermind"]["args"][-1] == "--readonly"
    if host.format == "toml":
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# my Codex settings\n") and config["model"] == "o4-mini"
        assert servers["evermind"]["startup_timeout_sec"] == 20  # a host-side field survives
    else:
        assert config["theme"] == "dark"
        assert servers["evermind"]["autoApprove"] == ["x"]
        assert path.read_text(encoding="utf-8").startswith('{\n    "theme"')  # indent kept

    before = path.read_bytes()
    (again,) = install([host], command, env=home)
    assert again.action == "unchanged" and path.read_bytes() == before


@pytest.mark.parametrize("host", HOSTS, ids=HOST_IDS)
def test_invalid_config_left_untouched(host: HostSpec, home: HostEnv) -> None:
    path = host.config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    broken = b'{"mcpServers": {"a": ' if host.format == "json" else b"[mcp_servers\nx = = 1\n"
    path.write_bytes(broken)
    for results in (
        install([host], command_for(home), env=home),
        uninstall([host], env=home),
    ):
        (result,) = results
        assert result.action == "invalid"
        assert "left untouched" in result.detail or "not valid" in result.detail
        assert path.read_bytes() == broken
        assert not path.with_name(path.name + ".bak").exists()
    if host.format == "json":
        path.write_text(json.dumps({host.root_key: ["not", "an", "object"]}))
        (result,) = install([host], command_for(home), env=home)
        assert result.action == "invalid" and "expected an object" in result.detail


@pytest.mark.parametrize("host", HOSTS, ids=HOST_IDS)
def test_uninstall_reverses(host: HostSpec, home: HostEnv) -> None:
    path = host.config_path(home)
    command = command_for(home)
    install([host], command, env=home)
    (removed,) = uninstall([host], env=home)
    assert removed.action == "removed"
    assert not path.exists()  # a file the installer created is gone again
    (absent,) = uninstall([host], env=home)
    assert absent.action == "absent"

    path.parent.mkdir(parents=True, exist_ok=True)
    original = existing_config(host, ["mcp"])
    path.write_text(original, encoding="utf-8")
    (removed,) = uninstall([host], env=home)
    assert removed.action == "removed"
    assert entry_of(host, path) is None
    assert entry_of(host, path, "github") == {"command": "npx", "args": ["-y", "github-mcp"]}
    assert path.with_name(path.name + ".bak").read_text(encoding="utf-8") == original


def test_host_paths_per_platform(tmp_path: Path) -> None:
    home = tmp_path
    mac = HostEnv(home, "darwin", {})
    win = HostEnv(home, "win32", {"APPDATA": str(home / "Roaming")})
    linux = HostEnv(home, "linux", {"CODEX_HOME": str(home / "cx")})
    by_name = {host.name: host for host in HOSTS}
    support = home / "Library" / "Application Support"
    assert by_name["claude-desktop"].config_path(mac) == (
        support / "Claude" / "claude_desktop_config.json"
    )
    assert by_name["claude-desktop"].config_path(win) == (
        home / "Roaming" / "Claude" / "claude_desktop_config.json"
    )
    assert by_name["vscode"].config_path(mac) == support / "Code" / "User" / "mcp.json"
    assert by_name["vscode"].config_path(win) == home / "Roaming" / "Code" / "User" / "mcp.json"
    assert by_name["cline"].config_path(linux) == (
        home
        / ".config/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json"
    )
    assert by_name["codex"].config_path(linux) == home / "cx" / "config.toml"
    assert by_name["claude-code"].config_path(win) == home / ".claude.json"


def test_auto_selects_installed_hosts(home: HostEnv) -> None:
    assert select_hosts("auto", home) == []
    (home.home / ".cursor").mkdir()
    (home.home / ".codex").mkdir()
    assert [h.name for h in select_hosts("auto", home)] == ["cursor", "codex"]
    assert [h.name for h in select_hosts("gemini, cursor,cursor", home)] == [
        "gemini-cli",
        "cursor",
    ]
    assert len(select_hosts("all", home)) == len(HOSTS)
    with pytest.raises(ValueError, match="unknown MCP host 'notepad'"):
        select_hosts("cursor,notepad", home)


def test_cli_installs_everywhere_and_the_written_command_serves(home: HostEnv) -> None:
    """The real CLI for all hosts; then the command in Cursor's config answers the SDK client."""
    env = dict(os.environ)
    memory_file = home.home / "shared" / "memory.db"
    run = [sys.executable, "-m", "evermind.cli", "install-mcp", "--host", "all"]
    first = procs.run(
        [*run, "--memory-file", str(memory_file)], env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    # + Claude Code's hooks and skill (tests/runtime/test_mcp_hooks.py)
    assert first.stdout.count("created") == len(HOSTS) + 2, first.stdout
    configs = {host.name: host.config_path(home).read_bytes() for host in HOSTS}
    entries = [entry_of(host, host.config_path(home)) or {} for host in HOSTS]
    assert len({(e["command"], tuple(e["args"])) for e in entries}) == 1  # one shared store
    assert entries[0]["args"][-2:] == ["--memory-file", str(memory_file)]

    second = procs.run(
        [*run, "--memory-file", str(memory_file)], env=env, capture_output=True, text=True
    )
    assert second.returncode == 0 and second.stdout.count("unchanged") == len(HOSTS) + 2
    assert {h.name: h.config_path(home).read_bytes() for h in HOSTS} == configs

    cursor = next(host for host in HOSTS if host.name == "cursor")
    entry = entry_of(cursor, cursor.config_path(home))
    assert entry is not None

    async def call_installed_server() -> None:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
        async with Client(params, read_timeout_seconds=30) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "memory_remember" in names
            await client.call_tool("memory_remember", {"key": "k", "content": "installed ok"})

    anyio.run(call_installed_server)
    assert memory_file.is_file()

    broken_gemini = next(h for h in HOSTS if h.name == "gemini-cli").config_path(home)
    broken_gemini.write_text("{oops")
    third = procs.run([*run, "--uninstall"], env=env, capture_output=True, text=True, check=False)
    assert third.returncode == 1  # one config was invalid: reported, not touched
    assert "invalid" in third.stdout and broken_gemini.read_text() == "{oops"
    assert third.stdout.count("removed") == len(HOSTS) - 1 + 2


def test_cli_install_with_a_shared_store_registers_it_and_its_hooks(home: HostEnv) -> None:
    """``install-mcp --store postgresql://…``: the hosts run ``mcp --store URL`` and Claude
    Code's hooks read the same URL (tests/runtime/test_mcp_hooks_shared_store.py runs them);
    a ``memory://`` store lives in one process, so no hook is installed for it."""
    url = "postgresql://team@db.internal:5432/memory"
    command = [sys.executable, "-m", "evermind.cli", "install-mcp", "--host", "claude-code"]
    done = procs.run([*command, "--store", url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    claude = next(host for host in HOSTS if host.name == "claude-code")
    entry = entry_of(claude, claude.config_path(home)) or {}
    assert entry["args"][-2:] == ["--store", url]
    hooks = [line for line in done.stdout.splitlines() if line.startswith("claude-hooks")]
    assert len(hooks) == 1 and "created" in hooks[0], done.stdout
    settings = (home.home / ".claude" / "settings.json").read_text(encoding="utf-8")
    assert f"--store {url}" in settings

    local = procs.run(
        [*command, "--store", "memory://", "--uninstall"], capture_output=True, text=True
    )
    assert local.returncode == 0, local.stderr
    again = procs.run([*command, "--store", "memory://"], capture_output=True, text=True)
    hooks = [line for line in again.stdout.splitlines() if line.startswith("claude-hooks")]
    assert len(hooks) == 1 and "skipped" in hooks[0] and "one process" in hooks[0], again.stdout

    bad = procs.run([*command, "--store", "mysql://db/x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "'mysql://db/x' is not a store" in bad.stderr, bad.stderr
