"""``evermind install-mcp``: registers the stdio memory server in MCP host configs, safely.

Owns the edit of each host's config file (table in ``evermind.mcp.hosts``):

- **Idempotent**: the desired entry is merged into the existing one (fields the host added,
  such as Cline's ``autoApprove``, are kept); when nothing would change, nothing is written,
  so a second run leaves every file byte-identical.
- **Backed up**: before any change to an existing file, its bytes are copied to
  ``<file>.bak``; the new text is written to a temporary file and renamed over the old one.
- **Invalid configs untouched**: a file that does not parse (or whose server key is not an
  object/table) is reported as ``invalid`` and left exactly as it was.
- **Reversible**: ``uninstall`` removes the entry; a server key left empty is removed, and a
  file left empty is deleted, so install + uninstall of a fresh host leaves no file behind.

JSON is re-serialised with the file's own indentation; TOML (Codex CLI) is edited with
tomlkit, which keeps comments and formatting. Every host is given the same absolute memory
file, so what one agent remembers another recalls. Native-only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from evermind.embedder.shipped import spec_path
from evermind.errors import ConfigError
from evermind.mcp.config import resolve_memory_file, resolve_model_file, resolve_store
from evermind.mcp.hosts import HostEnv, HostSpec, select_hosts

DEFAULT_NAME = "evermind"


class InvalidConfig(ConfigError):
    """A host config that cannot be edited safely (reported, never raised to the user)."""


@dataclass(frozen=True)
class HostResult:
    """What the installer did to one host's config.

    Attributes:
        host: The host's ``--host`` name.
        path: Its config file.
        action: ``created``, ``updated``, ``unchanged``, ``removed``, ``absent`` (nothing to
            remove) or ``invalid`` (left untouched).
        detail: Why, for ``invalid``; ``dry run`` when nothing was written on purpose.
        command: The command the host will run (install only).
    """

    host: str
    path: Path
    action: str
    detail: str = ""
    command: tuple[str, ...] = ()


def parse_hosts(spec: str, env: HostEnv | None = None) -> list[HostSpec]:
    """``--host`` → host specs (see :func:`evermind.mcp.hosts.select_hosts`)."""
    return select_hosts(spec, env)


def evermind_executable() -> list[str]:
    """The command that starts this Evermind: the ``evermind`` script beside this interpreter.

    Falls back to ``<this python> -m evermind.cli`` when the script is not there. The
    interpreter path is made absolute but not resolved, so a virtual environment's
    ``bin/python`` stays inside its environment.
    """
    python = os.path.abspath(sys.executable)
    folder = Path(python).parent
    for name in ("evermind", "evermind.exe"):
        script = folder / name
        if script.is_file():
            return [str(script)]
    return [python, "-m", "evermind.cli"]


def server_command(
    memory_file: str | None,
    model: str | None = None,
    readonly: bool = False,
    store: str | None = None,
    embedder: str | None = None,
) -> list[str]:
    """The full stdio command the hosts run: executable, ``mcp`` and absolute paths.

    Args:
        memory_file: The SQLite memory file (None: the default one).
        model: A ``.evermind`` package to embed with.
        readonly: Register the read-only server.
        store: A ``--store`` instead of ``memory_file``: a SQLite path or ``sqlite:///PATH``
            (registered as ``--memory-file``), or a shared store's URL (registered as is).
        embedder: ``base`` or a static embedder file, registered as ``--embedder`` (a path
            made absolute); not with ``model``. It wins over ``$EVERMIND_MODEL``.

    Raises:
        ConfigError: The model file does not exist, both ``model`` and ``embedder`` are
            given, the memory path is a directory, or the store URL has a scheme ``--store``
            does not take.
        InputError: The embedder file does not exist.
    """
    if model is not None and embedder is not None:
        raise ConfigError(
            "install-mcp: expected --model or --embedder, got both; pass one (--model embeds "
            "with a .evermind package, --embedder with a static embedder file)"
        )
    location = resolve_store(store) if store else resolve_memory_file(memory_file)
    flag = "--store" if isinstance(location, str) else "--memory-file"
    command = [*evermind_executable(), "mcp", flag, str(location)]
    if embedder is not None:
        command += ["--embedder", spec_path(embedder)]
    else:
        model_file = resolve_model_file(model)
        if model_file is not None:
            command += ["--model", str(model_file)]
    if readonly:
        command.append("--readonly")
    return command


def install(
    hosts: list[HostSpec],
    command: list[str],
    *,
    name: str = DEFAULT_NAME,
    dry_run: bool = False,
    env: HostEnv | None = None,
) -> list[HostResult]:
    """Adds (or updates) the ``name`` server entry in every host's config."""
    env = HostEnv.current() if env is None else env
    results = []
    for host in hosts:
        path = host.config_path(env)
        try:
            action = _edit(host, path, name, host.entry(command), dry_run)
            results.append(HostResult(host.name, path, action, _dry(dry_run), tuple(command)))
        except InvalidConfig as err:
            results.append(HostResult(host.name, path, "invalid", str(err)))
    return results


def uninstall(
    hosts: list[HostSpec],
    *,
    name: str = DEFAULT_NAME,
    dry_run: bool = False,
    env: HostEnv | None = None,
) -> list[HostResult]:
    """Removes the ``name`` server entry from every host's config."""
    env = HostEnv.current() if env is None else env
    results = []
    for host in hosts:
        path = host.config_path(env)
        try:
            action = _edit(host, path, name, None, dry_run)
            results.append(HostResult(host.name, path, action, _dry(dry_run)))
        except InvalidConfig as err:
            results.append(HostResult(host.name, path, "invalid", str(err)))
    return results


def _dry(dry_run: bool) -> str:
    return "dry run: nothing written" if dry_run else ""


def _edit(
    host: HostSpec, path: Path, name: str, entry: dict[str, Any] | None, dry_run: bool
) -> str:
    """Applies one install (``entry``) or uninstall (``None``); returns the action taken."""
    try:
        original = path.read_bytes() if path.exists() else None
    except OSError as err:
        raise InvalidConfig(f"cannot read: {err.strerror}") from err
    if host.format == "toml":
        new_text, action = _edit_toml(original, host.root_key, name, entry)
    else:
        new_text, action = _edit_json(original, host.root_key, name, entry)
    if action in ("unchanged", "absent") or dry_run:
        return action
    if original is not None:
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    if new_text is None:
        path.unlink()
    else:
        _write_atomic(path, new_text, original is not None)
    return action


def _decode(original: bytes) -> str:
    try:
        return original.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidConfig(f"not UTF-8 text (byte {err.start})") from err


def _edit_json(
    original: bytes | None, root_key: str, name: str, entry: dict[str, Any] | None
) -> tuple[str | None, str]:
    text = "" if original is None else _decode(original)
    try:
        doc = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as err:
        raise InvalidConfig(
            f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); left untouched, "
            "fix it and run again"
        ) from err
    if not isinstance(doc, dict):
        raise InvalidConfig(f"expected a JSON object at the top, found {type(doc).__name__}")
    servers = doc.get(root_key, {})
    if not isinstance(servers, dict):
        raise InvalidConfig(f"{root_key!r} is a {type(servers).__name__}, expected an object")
    current = servers.get(name)
    if entry is None:
        if current is None:
            return None, "absent"
        del servers[name]
        if not servers:
            doc.pop(root_key, None)
        return (_dump_json(doc, text) if doc else None), "removed"
    merged = {**current, **entry} if isinstance(current, dict) else dict(entry)
    if merged == current:
        return None, "unchanged"
    servers[name] = merged
    doc[root_key] = servers
    return _dump_json(doc, text), ("created" if current is None else "updated")


def _dump_json(doc: dict[str, Any], previous: str) -> str:
    """Serialises ``doc`` with the indentation the previous text used (2 spaces by default)."""
    indent: str | int = 2
    match = re.search(r"^[{\[][^\n]*\n([ \t]+)\S", previous)
    if match:
        indent = match.group(1) if "\t" in match.group(1) else len(match.group(1))
    return json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"


def _edit_toml(
    original: bytes | None, root_key: str, name: str, entry: dict[str, Any] | None
) -> tuple[str | None, str]:
    text = "" if original is None else _decode(original)
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as err:
        raise InvalidConfig(
            f"not valid TOML ({err}); left untouched, fix it and run again"
        ) from err
    servers = doc.get(root_key)
    if servers is not None and not isinstance(servers, dict):
        raise InvalidConfig(f"{root_key!r} is not a table")
    current = None if servers is None else servers.get(name)
    if current is not None and not isinstance(current, dict):
        raise InvalidConfig(f"{root_key}.{name} is not a table")
    if entry is None:
        if servers is None or current is None:
            return None, "absent"
        del servers[name]
        if not servers:
            del doc[root_key]
        out = tomlkit.dumps(doc).rstrip()
        return (out + "\n" if out else None), "removed"
    plain_current = None if current is None else _unwrap(current)
    if plain_current is not None and {**plain_current, **entry} == plain_current:
        return None, "unchanged"
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc[root_key] = servers
    if current is None:
        table = tomlkit.table()
        for key, value in entry.items():
            table[key] = value
        servers[name] = table
    else:
        for key, value in entry.items():
            current[key] = value
    return tomlkit.dumps(doc).rstrip() + "\n", ("created" if current is None else "updated")


def _unwrap(value: Any) -> dict[str, Any]:
    unwrap = getattr(value, "unwrap", None)
    plain = unwrap() if callable(unwrap) else value
    return dict(plain)


def _write_atomic(path: Path, text: str, existed: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        if existed:
            shutil.copymode(path, temp)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


__all__ = [
    "DEFAULT_NAME",
    "HostResult",
    "evermind_executable",
    "install",
    "parse_hosts",
    "server_command",
    "uninstall",
]
