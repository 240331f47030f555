"""The MCP tools ``memory_compact`` and ``memory_restore``.

Owns :class:`CompactTools` (the two tool bodies over one store and the model the server was
given with ``--model``) and the text of their answers. How a stub reads (its archived
original, or "content lost — verify before trusting") is memory's
(:class:`evermind.memory.archive.StubResolver`). Native-only (imports the ``mcp`` SDK).
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from evermind.errors import EvermindError
from evermind.memory import MemoryStore
from evermind.memory.compaction import CompactReport, RestoreReport, compact, restore

Keys = Annotated[
    list[str] | None,
    Field(description="The keys to compact; omit to try every live memory."),
]
Dump = Annotated[
    list[dict[str, Any]] | str,
    Field(
        description="The texts to restore: a list (or its JSON) of {key, content} or {id, text}."
    ),
]

DESCRIPTIONS = {
    "memory_compact": (
        "Shrink memories the local Evermind model has absorbed to a one-line stub "
        "('[absorbed→Evermind vN] <first line>'). Each memory is kept unless a recall probe "
        "passes (its most specific word blanked, the model must produce it); the original is "
        "archived before the stub is written, and reads resolve a stub to it. Call this only "
        "when the user asks to compact or free memory; it needs the server's --model."
    ),
    "memory_restore": (
        "Write texts back into memory from a dump: a list of {key, content} (or {id, text}), "
        "matched by key; an existing memory keeps its tags and importance. Each text is checked "
        "as memory_remember checks it, and a dump with one bad entry is refused whole. Call "
        "this when the user asks to restore memories from an export or backup."
    ),
}


def render_compacted(report: CompactReport) -> str:
    """The answer of ``memory_compact``: what was compacted, skipped and why."""
    lines = [f"compacted {len(report.compacted)}, skipped {len(report.skipped)}"]
    if report.backup is not None:
        lines.append(f"previous store file backed up to {report.backup}")
    lines += [f"compacted {key!r} -> {stub}" for key, stub in report.compacted]
    lines += [f"skipped {key!r}: {why}" for key, why in report.skipped]
    return "\n".join(lines)


def render_restored(report: RestoreReport) -> str:
    """The answer of ``memory_restore``."""
    lines = [
        f"restored {len(report.restored)}, created {len(report.created)}, "
        f"unchanged {len(report.unchanged)}"
    ]
    lines += [f"restored {key!r}" for key in report.restored]
    lines += [f"created {key!r}" for key in report.created]
    return "\n".join(lines)


class CompactTools:
    """The bodies of ``memory_compact`` and ``memory_restore``.

    Args:
        store: The memory store the tools rewrite.
        model: The local Evermind model that probes recall (None: compaction is refused).
        max_content_chars: Longest text ``memory_restore`` accepts (``memory_remember``'s cap;
            None: no cap).
    """

    def __init__(
        self, store: MemoryStore, model: Any = None, max_content_chars: int | None = None
    ) -> None:
        self.store = store
        self.model = model
        self.max_content_chars = max_content_chars

    async def compact(self, keys: Keys = None) -> str:
        """Compacts the absorbed memories of ``keys`` (default all); reports each decision."""
        if self.model is None:
            raise ToolError(
                "memory_compact: compaction needs a model; nothing was changed. hint: start the "
                "server with --model x.evermind (the package the memories were trained into)"
            )
        try:
            report = await compact(self.store, self.model, keys)
        except EvermindError as err:
            raise ToolError(f"memory_compact failed (nothing lost): {err}") from err
        return render_compacted(report)

    async def restore(self, dump: Dump) -> str:
        """Restores the dump's texts, matched by key."""
        try:
            report = await restore(self.store, dump, self.max_content_chars)
        except EvermindError as err:
            raise ToolError(f"memory_restore failed: {err}") from err
        return render_restored(report)


__all__ = ["DESCRIPTIONS", "CompactTools", "render_compacted", "render_restored"]
