"""Evidence for a changed fact: does the world agree with the new value or the old one?

When a write conflicts with an incumbent memory, write-through cognition
(:mod:`evermind.memory.write_through`) asks an :class:`EvidenceGatherer` before choosing:
``supports=True`` supersedes the incumbent (archived as history), ``False`` rejects the write
(saying why), ``None`` (no evidence either way) keeps both and marks the new one contested.

Shipped gatherers:

- :class:`WorkspacePresenceGatherer`: the files and folders the fact names (``deploy/app.env``,
  ``/srv/app/config.yaml``) must exist under a root the server was given — never outside it
  (``..`` and symlinks are resolved first); a named file that holds the new value supports
  the fact, one that holds only the old value is evidence against it.
- :class:`HttpProbeGatherer`: every ``http(s)://`` URL the fact names must answer (status
  below 400). It makes network requests on the say-so of whoever writes memory, so it is off
  unless the server is started with it (``--probe-http``).
- :class:`AllGatherers`: several at once; any evidence against wins, then any support.

Browser-safe except :class:`HttpProbeGatherer`, which imports ``httpx`` when it probes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from evermind.memory.cognition import Fact
from evermind.memory.records import MemoryRecord
from evermind.memory.subject import path_values, values

#: Files larger than this are checked for existence only, never read.
MAX_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Evidence:
    """What a gatherer found.

    Attributes:
        supports: True: the new fact holds; False: it does not; None: no evidence either way.
        detail: One line saying what was checked and found.
    """

    supports: bool | None
    detail: str


@runtime_checkable
class EvidenceGatherer(Protocol):
    """Checks a fact that would change ``incumbent`` (None: a same-key rewrite with no match)."""

    async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        """Returns the evidence for ``fact`` (never raises for an unreachable world)."""
        ...


def _contains(text: str, value: str) -> bool:
    """Whether ``value`` appears in ``text`` as a whole token (case-insensitive)."""
    pattern = r"(?<![\w.])" + re.escape(value) + r"(?![\w])"
    return re.search(pattern, text, re.IGNORECASE) is not None


class WorkspacePresenceGatherer:
    """Evidence from the files a fact names, under ``root`` only.

    Args:
        root: The workspace folder; paths in facts are read relative to it, and an absolute
            path (or one that resolves, through ``..`` or a symlink) outside it is ignored.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def _inside(self, named: str) -> Path | None:
        raw = Path(named).expanduser() if named.startswith("~") else Path(named)
        candidate = raw if raw.is_absolute() else self.root / raw
        resolved = candidate.resolve()
        return resolved if resolved.is_relative_to(self.root) else None

    async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        """Checks the named paths (existence, then whether files hold the new or old value)."""
        return await asyncio.to_thread(self._gather, fact, incumbent)

    def _gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        named = path_values(fact.text)
        if not named:
            return Evidence(None, "the fact names no file")
        old_all = values(incumbent.content) if incumbent is not None else frozenset()
        new_all = values(fact.text)
        paths = set(named)
        new_values = sorted(new_all - old_all - paths)
        old_values = sorted(
            old_all - new_all - set(path_values(incumbent.content) if incumbent else [])
        )
        supports: list[str] = []
        against: list[str] = []
        for name in named:
            path = self._inside(name)
            if path is None:
                continue  # outside the workspace: never looked at
            if not path.exists():
                against.append(f"{name} does not exist in the workspace")
                continue
            if not path.is_file() or not (new_values or old_values):
                supports.append(f"{name} exists")
                continue
            if path.stat().st_size > MAX_READ_BYTES:
                supports.append(f"{name} exists (too large to read)")
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found_new = [v for v in new_values if _contains(text, v)]
            found_old = [v for v in old_values if _contains(text, v)]
            if found_new:
                supports.append(f"{name} contains {', '.join(found_new)}")
            elif found_old:
                against.append(
                    f"{name} contains {', '.join(found_old)}, not {', '.join(new_values) or '-'}"
                )
        if against:
            return Evidence(False, "; ".join(against))
        if supports:
            return Evidence(True, "; ".join(supports))
        return Evidence(None, "the files it names are outside the workspace or hold neither value")


class HttpProbeGatherer:
    """Evidence from the ``http(s)`` URLs a fact names: each must answer below status 400.

    Args:
        timeout: Seconds per request.
    """

    def __init__(self, timeout: float = 2.0) -> None:
        self.timeout = timeout

    async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        """GETs every URL the fact names (redirects not followed)."""
        import httpx

        urls = [v for v in values(fact.text) if v.startswith(("http://", "https://"))]
        if not urls:
            return Evidence(None, "the fact names no URL")
        answered: list[str] = []
        failed: list[str] = []
        async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as client:
            for url in sorted(urls):
                try:
                    response = await client.get(url)
                except httpx.HTTPError as err:
                    failed.append(f"{url} did not answer ({type(err).__name__})")
                    continue
                if response.status_code < 400:
                    answered.append(f"{url} answered {response.status_code}")
                else:
                    failed.append(f"{url} answered {response.status_code}")
        if failed:
            return Evidence(False, "; ".join(failed))
        return Evidence(True, "; ".join(answered))


class AllGatherers:
    """Runs several gatherers: any evidence against wins, then any support, else None."""

    def __init__(self, gatherers: Sequence[EvidenceGatherer]) -> None:
        self.gatherers = list(gatherers)

    async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        """The combined evidence (details of the deciding gatherers, joined)."""
        found = [await g.gather(fact, incumbent) for g in self.gatherers]
        for verdict in (False, True):
            details = [e.detail for e in found if e.supports is verdict]
            if details:
                return Evidence(verdict, "; ".join(details))
        return Evidence(None, "; ".join(e.detail for e in found) or "no evidence gatherer")


def configured(workspace_root: str | Path | None, probe_http: bool) -> EvidenceGatherer | None:
    """The gatherer a server's settings ask for: workspace files, URLs when allowed, or None."""
    gatherers: list[EvidenceGatherer] = []
    if workspace_root is not None:
        gatherers.append(WorkspacePresenceGatherer(workspace_root))
    if probe_http:
        gatherers.append(HttpProbeGatherer())
    if not gatherers:
        return None
    return gatherers[0] if len(gatherers) == 1 else AllGatherers(gatherers)


__all__ = [
    "MAX_READ_BYTES",
    "AllGatherers",
    "Evidence",
    "EvidenceGatherer",
    "HttpProbeGatherer",
    "WorkspacePresenceGatherer",
    "configured",
]
