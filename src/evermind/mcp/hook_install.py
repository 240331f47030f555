"""Registering the memory hooks in Claude Code's user settings, and the skill beside them.

``evermind install-mcp`` (unless ``--no-hooks``) adds one command hook per event to
``~/.claude/settings.json`` (``HOME`` from the environment)::

    {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
        "command": "<python> -m evermind.mcp.hook user-prompt-submit --memory-file F",
        "timeout": 10}]}], …}}

(``--store URL`` instead of ``--memory-file F`` for a shared store)

for SessionStart, UserPromptSubmit, PreCompact and Stop, and writes the skill file
(``~/.claude/skills/evermind-memory/SKILL.md``) that tells the agent how to use memory.
Ours are the hooks whose command runs ``evermind.mcp.hook``; every other hook, matcher group
and setting is kept as it was. Same guarantees as the server installer
(:mod:`evermind.mcp.installer`): idempotent (nothing written when nothing changes), a
``.bak`` before any change, atomic writes, an unparsable file left untouched and reported
``invalid``, and ``uninstall`` removes only ours (a file left empty is
deleted, its bytes kept in the ``.bak``). Native-only.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from evermind.mcp.hook import EVENTS
from evermind.mcp.hosts import HostEnv
from evermind.mcp.installer import HostResult, InvalidConfig, _decode, _dump_json, _write_atomic
from evermind.mcp.tools import READ_TOOLS, WRITE_TOOLS

#: What marks a hook command as ours.
MARKER = "evermind.mcp.hook"
#: Seconds Claude Code waits for one of our hooks before cancelling it.
HOOK_TIMEOUT_S = 10
SKILL_NAME = "evermind-memory"


def settings_path(env: HostEnv) -> Path:
    """Claude Code's user settings file."""
    return env.home / ".claude" / "settings.json"


def skill_path(env: HostEnv) -> Path:
    """Where the memory skill is installed."""
    return env.home / ".claude" / "skills" / SKILL_NAME / "SKILL.md"


def skill_text() -> str:
    """The packaged skill file, its tool list written from the server's own
    (:data:`~evermind.mcp.tools.READ_TOOLS`, :data:`~evermind.mcp.tools.WRITE_TOOLS`), so the
    skill never names a tool the server lacks or misses one it has."""
    template = resources.files("evermind.mcp").joinpath("data/SKILL.md").read_text(encoding="utf-8")
    return template.replace("{{tools}}", tool_sentence(READ_TOOLS, WRITE_TOOLS))


#: Small counts in words, as the skill says them.
_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def tool_sentence(read: Sequence[str], write: Sequence[str]) -> str:
    """``The `evermind` MCP server gives you N tools: …`` (read-only ones first)."""
    names = [*read, *write]
    count = _WORDS[len(names)] if len(names) < len(_WORDS) else str(len(names))
    read_count = _WORDS[len(read)] if len(read) < len(_WORDS) else str(len(read))
    listed = ", ".join(f"`{name}`" for name in names)
    first = "the first one" if len(read) == 1 else f"the first {read_count}"
    return (
        f"The `evermind` MCP server gives you {count} tools:\n{listed} "
        f"(a read-only token gets {first})."
    )


def hook_commands(location: Path | str, python: str | None = None) -> dict[str, str]:
    """The shell command registered for each Claude Code event.

    Args:
        location: The SQLite memory file (``--memory-file``), or a store's URL (``--store``).
        python: The interpreter (default: this one).
    """
    interpreter = python or str(Path(sys.executable).absolute())
    base = f"{shlex.quote(interpreter)} -m {MARKER}"
    flag = "--memory-file" if isinstance(location, Path) else "--store"
    return {
        claude: f"{base} {mode} {flag} {shlex.quote(str(location))}"
        for mode, claude in EVENTS.items()
    }


def _is_ours(hook: object) -> bool:
    return isinstance(hook, dict) and MARKER in str(hook.get("command", ""))


def _strip_ours(groups: list[Any]) -> list[Any]:
    """The event's matcher groups without our hooks (groups left empty dropped)."""
    kept = []
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            hooks = [h for h in group["hooks"] if not _is_ours(h)]
            if not hooks and any(_is_ours(h) for h in group["hooks"]):
                continue
            group = {**group, "hooks": hooks}
        kept.append(group)
    return kept


def _edit(doc: dict[str, Any], commands: dict[str, str] | None) -> dict[str, Any]:
    """``doc`` with our hooks set to ``commands`` (None: removed)."""
    hooks = doc.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidConfig(f"'hooks' is a {type(hooks).__name__}, expected an object")
    new_hooks: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise InvalidConfig(f"hooks.{event} is a {type(groups).__name__}, expected a list")
        stripped = _strip_ours(groups)
        if stripped or not groups:  # an event we emptied goes; one already empty stays
            new_hooks[event] = stripped
    for event, command in (commands or {}).items():
        ours = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
        new_hooks[event] = [*new_hooks.get(event, []), {"hooks": [ours]}]
    out = dict(doc)
    if new_hooks or ("hooks" in doc and not hooks):
        out["hooks"] = new_hooks
    else:
        out.pop("hooks", None)
    return out


def _settings(commands: dict[str, str] | None, env: HostEnv, dry_run: bool) -> HostResult:
    path = settings_path(env)
    try:
        original = path.read_bytes() if path.exists() else None
        text = "" if original is None else _decode(original)
        try:
            doc = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as err:
            raise InvalidConfig(
                f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); left "
                "untouched, fix it and run again"
            ) from err
        if not isinstance(doc, dict):
            raise InvalidConfig(f"expected a JSON object at the top, found {type(doc).__name__}")
        new = _edit(doc, commands)
    except InvalidConfig as err:
        return HostResult("claude-hooks", path, "invalid", str(err))
    except OSError as err:
        return HostResult("claude-hooks", path, "invalid", f"cannot read: {err.strerror}")
    if new == doc:
        return HostResult("claude-hooks", path, "absent" if commands is None else "unchanged")
    action = "removed" if commands is None else "created" if original is None else "updated"
    if not dry_run:
        if original is not None:
            shutil.copy2(path, path.with_name(path.name + ".bak"))
        if not new and original is not None and commands is None:
            path.unlink()
        else:
            _write_atomic(path, _dump_json(new, text), original is not None)
    return HostResult("claude-hooks", path, action, "dry run: nothing written" if dry_run else "")


def _skill(install: bool, env: HostEnv, dry_run: bool) -> HostResult:
    path = skill_path(env)
    wanted = skill_text()
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if install:
        if current == wanted:
            return HostResult("claude-skill", path, "unchanged")
        action = "created" if current is None else "updated"
        if not dry_run:
            if current is not None:
                shutil.copy2(path, path.with_name(path.name + ".bak"))
            _write_atomic(path, wanted, current is not None)
        return HostResult("claude-skill", path, action)
    if current is None:
        return HostResult("claude-skill", path, "absent")
    if not dry_run:
        shutil.copy2(path, path.with_name(path.name + ".bak"))
        path.unlink()
    return HostResult("claude-skill", path, "removed")


def install_hooks(
    location: Path | str, *, dry_run: bool = False, env: HostEnv | None = None
) -> list[HostResult]:
    """Registers our four hooks in Claude Code's settings and installs the skill.

    Args:
        location: The SQLite memory file, or a shared store's URL (``postgresql://…``,
            ``qdrant://…``) the hooks read and write as ``evermind mcp --store`` does.
    """
    env = HostEnv.current() if env is None else env
    return [_settings(hook_commands(location), env, dry_run), _skill(True, env, dry_run)]


def skip_hooks(url: str, env: HostEnv | None = None) -> list[HostResult]:
    """What install does for a ``memory://`` store: no hooks and no skill, and one line why
    (each hook is a process of its own, so a process-local store would be empty to it)."""
    env = HostEnv.current() if env is None else env
    reason = f"{url} lives in one process; a hook (a process per event) would see none of it"
    return [HostResult("claude-hooks", settings_path(env), "skipped", reason)]


def uninstall_hooks(*, dry_run: bool = False, env: HostEnv | None = None) -> list[HostResult]:
    """Removes our hooks (only ours) and the skill."""
    env = HostEnv.current() if env is None else env
    return [_settings(None, env, dry_run), _skill(False, env, dry_run)]


__all__ = [
    "HOOK_TIMEOUT_S",
    "MARKER",
    "hook_commands",
    "install_hooks",
    "settings_path",
    "skill_path",
    "skill_text",
    "skip_hooks",
    "uninstall_hooks",
]
