"""Evidence gatherers: functions that check a claim against the world before it is believed.

A gatherer is any callable ``gather(claim) -> Evidence`` (or an awaitable of it). The one
shipped here, ``workspace_presence_gatherer(root)``, checks that the files, paths and code
identifiers a claim names exist in a workspace directory: a claim that "the retry logic lives in
`src/routing/retry.py`" is refuted if that file does not exist.

References are taken from the statement: every `backticked` span, plus bare tokens that look
like paths (contain ``/``) or file names (``name.ext``). A reference that looks like a path is
looked up as a path under the root (or as a suffix of a workspace file's path); any other
backticked token is an identifier, searched as a whole word in the workspace's text files.
Browser-safe (standard library only); it reads the file system, so keep workspaces modest —
the scan is bounded by ``max_files`` and ``max_file_bytes``.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from evermind.cognition.reconcile import Claim, Evidence, EvidenceStatus
from evermind.errors import ConfigError

logger = logging.getLogger(__name__)

Gatherer = Callable[[Claim], "Evidence | Awaitable[Evidence]"]

_BACKTICKED = re.compile(r"`([^`\n]{1,200})`")
_PATHLIKE = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)+[\w.-]+|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|ts|tsx|json|toml|ya?ml"
    r"|md|txt|cfg|ini|sql|sh|rs|go|java|c|h|cpp|hpp|wgsl|html|css|lock)\b"
)
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", "dist"}


def extract_references(statement: str) -> tuple[list[str], list[str]]:
    """Returns ``(paths, identifiers)`` named in ``statement`` (de-duplicated, in order)."""
    paths: list[str] = []
    identifiers: list[str] = []
    for span in _BACKTICKED.findall(statement):
        token = span.strip()
        target = paths if ("/" in token or _PATHLIKE.fullmatch(token)) else identifiers
        if token and token not in target:
            target.append(token)
    unquoted = _BACKTICKED.sub(" ", statement)
    for match in _PATHLIKE.finditer(unquoted):
        token = match.group().rstrip(".")
        if "://" in unquoted[max(0, match.start() - 3) : match.start() + 1]:
            continue  # part of a URL, not a workspace path
        if token not in paths:
            paths.append(token)
    return paths, identifiers


def workspace_presence_gatherer(
    root: str | os.PathLike[str],
    *,
    max_files: int = 20_000,
    max_file_bytes: int = 1 << 20,
) -> Callable[[Claim], Evidence]:
    """Builds a gatherer that checks a claim's referenced paths and identifiers in ``root``.

    Args:
        root: The workspace directory.
        max_files: Stop scanning after this many files.
        max_file_bytes: Skip files larger than this when searching identifiers.

    Returns:
        ``gather(claim) -> Evidence``: supported when every reference exists, refuted when any
        is missing (the notes name them), unknown when the claim names nothing checkable.

    Raises:
        ConfigError: ``root`` is not a directory.
    """
    base = Path(root).resolve()
    if not base.is_dir():
        raise ConfigError(
            f"workspace_presence_gatherer: expected a directory, got {str(root)!r}; "
            "hint: pass the project's root folder"
        )

    def files() -> list[Path]:
        found: list[Path] = []
        for folder, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in sorted(names):
                found.append(Path(folder) / name)
                if len(found) >= max_files:
                    logger.warning("workspace scan stopped at %d files under %s", max_files, base)
                    return found
        return found

    def has_path(token: str, listing: list[Path]) -> bool:
        candidate = (base / token.lstrip("/")).resolve()
        if candidate.is_relative_to(base) and candidate.exists():
            return True
        suffix = "/" + token.strip("/")
        return any(p.as_posix().endswith(suffix) for p in listing)

    def has_identifier(token: str, listing: list[Path]) -> bool:
        pattern = re.compile(rf"(?<![\w]){re.escape(token)}(?![\w])")
        for path in listing:
            try:
                if path.stat().st_size > max_file_bytes:
                    continue
                text = path.read_text("utf-8", errors="ignore")
            except OSError:
                continue
            if pattern.search(text):
                return True
        return False

    def gather(claim: Claim) -> Evidence:
        paths, identifiers = extract_references(claim.statement)
        if not paths and not identifiers:
            return Evidence(EvidenceStatus.UNKNOWN, ("workspace: no file or identifier named",))
        listing = files()
        notes, missing = [], 0
        for token in paths:
            ok = has_path(token, listing)
            missing += not ok
            notes.append(f"workspace: path {token!r} {'exists' if ok else 'not found'}")
        for token in identifiers:
            ok = has_identifier(token, listing)
            missing += not ok
            notes.append(f"workspace: identifier {token!r} {'found' if ok else 'not found'}")
        status = EvidenceStatus.REFUTED if missing else EvidenceStatus.SUPPORTED
        return Evidence(status, tuple(notes))

    return gather


async def run_gatherer(gather: Gatherer | None, claim: Claim) -> Evidence:
    """Calls ``gather`` (sync or async); None gives unknown evidence.

    Raises:
        ConfigError: The gatherer returned something other than ``Evidence``.
    """
    if gather is None:
        return Evidence()
    result = gather(claim)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, Evidence):
        raise ConfigError(
            f"gatherer {getattr(gather, '__name__', gather)!r}: expected Evidence, got "
            f"{type(result).__name__}; hint: return Evidence(status, notes)"
        )
    return result
