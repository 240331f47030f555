"""Lossless compaction of a SQLite memory store, and restore from a dump.

:func:`compact` replaces each memory the local Evermind model has absorbed with its stub
(:mod:`evermind.memory.stubs`). Absorbed means the recall probe passed: the memory's most
specific word (highest IDF over the store's live memories; ties go to the later word, which
the model sees the most context for, then the longer; never the first word) is blanked, and
the model's greedy continuation of the text before it must start with that word.

On a pass, in this order: the store file is backed up once (``.bak.1``…``.bak.3``, SQLite
backup API), the original is committed to the archive (:mod:`evermind.memory.archive`), and
only then the memory's content becomes the stub. A probe failure, or a memory that changed
meanwhile, leaves the memory untouched.

:func:`restore` writes texts back from a dump (``[{key, content}]`` or ``[{id, text}]``),
matched by key. :func:`forget` forgets a memory and its archived originals. Native (the model
is a ``evermind.model.inference.Model``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError
from evermind.memory.archive import COMPACTED_META, Archive, rotate_backups, text_hash
from evermind.memory.records import MemoryRecord, validate_key, validate_memory_text
from evermind.memory.store import MemoryStore
from evermind.memory.stubs import is_stub, make_stub
from evermind.search.terms import idf_table

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Probe:
    """One recall probe: the blanked ``word``, what the model ``produced``, and the verdict."""

    passed: bool
    reason: str
    word: str = ""
    produced: str = ""


@dataclass
class CompactReport:
    """What :func:`compact` did: ``compacted`` (key, stub), ``skipped`` (key, why), ``backup``."""

    compacted: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    backup: Path | None = None


@dataclass
class RestoreReport:
    """What :func:`restore` did: keys ``restored``, ``created`` and ``unchanged``."""

    restored: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    backup: Path | None = None


def _words(text: str) -> list[str]:
    """The case-folded words of ``text`` (what the probe's IDF counts)."""
    return [word.casefold() for word in _WORD.findall(text)]


def specific_word(text: str, idf: dict[str, float]) -> tuple[str, int] | None:
    """The word the probe blanks and where it starts, or None when no word follows another."""
    words = [(m.group(0), m.start()) for m in _WORD.finditer(text) if text[: m.start()].strip()]
    if not words:
        return None
    return max(words, key=lambda item: (idf.get(item[0].casefold(), 0.0), item[1], len(item[0])))


def probe(model: Any, text: str, idf: dict[str, float]) -> Probe:
    """Whether ``model`` greedily continues the text before its most specific word with it."""
    picked = specific_word(text, idf)
    if picked is None:
        return Probe(False, "no word to blank (a text needs a word after its first)")
    word, start = picked
    prefix = text[:start].rstrip()
    budget = len(word.encode("utf-8")) + 2
    produced = model.complete(
        prefix, max_new_tokens=budget, temperature=0.0, top_k=None, top_p=None
    ).text
    if produced.lstrip().startswith(word):
        return Probe(True, "model recalled the blanked word", word, produced)
    return Probe(
        False, f"probe failed: blanked {word!r}, model produced {produced!r}", word, produced
    )


def model_version(model: Any) -> str:
    """The absorbing model's package version (the stub's ``vN``)."""
    try:
        return str(model.package.manifest["version"])
    except (AttributeError, KeyError, TypeError) as err:
        raise ConfigError("compaction: the model has no package version; load a .evermind") from err


def _memory_file(store: MemoryStore) -> str:
    path = getattr(store.backend, "path", None)
    if not isinstance(path, str) or path == ":memory:":
        raise ConfigError(
            "compaction needs a SQLite memory file (the archive and backups live beside it); "
            f"this store's backend is {type(store.backend).__name__}"
        )
    return path


async def _live_records(store: MemoryStore) -> list[MemoryRecord]:
    _, records = await store.backend.load_all()
    now = store.clock()
    return [r for r in records if not r.archived and not r.is_expired(now)]


async def compact(
    store: MemoryStore, model: Any, keys: Sequence[str] | None = None
) -> CompactReport:
    """Compacts the memories of ``keys`` (default: every live memory) that ``model`` absorbed.

    Raises:
        ConfigError: No model, or the store is not on a SQLite file.
        StorageError: The archive or the store failed; a memory is stubbed only after its
            original was archived, so nothing is lost.
    """
    if model is None:
        raise ConfigError("compaction needs a model: start the server with --model x.evermind")
    memory_file = _memory_file(store)
    version = model_version(model)
    live = await _live_records(store)
    # ln((N+1)/(df+0.5)) of each case-folded word over the live memories.
    idf = idf_table((r.content for r in live), _words, smoothing=0.5)
    by_key = {r.key: r for r in live}
    wanted = list(dict.fromkeys(keys)) if keys is not None else sorted(by_key)
    report = CompactReport()
    passed: list[tuple[MemoryRecord, str]] = []
    for key in wanted:
        record = by_key.get(key)
        if record is None:
            report.skipped.append((key, "no live memory has this key"))
        elif is_stub(record.content):
            report.skipped.append((key, "already a stub (never re-stubbed)"))
        else:
            result = await asyncio.to_thread(probe, model, record.content, idf)
            if result.passed:
                passed.append((record, make_stub(version, record.content)))
            else:
                report.skipped.append((key, result.reason))
    if passed:
        report.backup = await asyncio.to_thread(rotate_backups, memory_file)
    archive = Archive(memory_file)
    for record, stub in passed:
        await _stub_one(store, archive, record, stub, version, report)
    return report


async def _stub_one(
    store: MemoryStore,
    archive: Archive,
    record: MemoryRecord,
    stub: str,
    version: str,
    report: CompactReport,
) -> None:
    """Archives ``record``'s text (committed), then replaces its content with ``stub``."""
    current = await store.get(record.key)
    if current is None or current.content != record.content:
        report.skipped.append((record.key, "changed or deleted during compaction; left as is"))
        return
    namespace = store.backend.namespace
    await asyncio.to_thread(archive.put, namespace, record.key, record.content, stub)
    meta = dict(current.meta)
    # The link a read resolves by: the stub stands for the archived text of this hash only.
    meta[COMPACTED_META] = {"model_version": version, "sha256": text_hash(record.content)}
    await store.write([replace(current, content=stub, updated_at=store.clock(), meta=meta)])
    report.compacted.append((record.key, stub))


def parse_dump(dump: object, max_chars: int | None = None) -> list[tuple[str, str]]:
    """The (key, text) pairs of a dump: a list (or JSON) of ``{key, content}`` or ``{id, text}``.

    Each text passes :func:`~evermind.memory.records.validate_memory_text` (the check
    ``memory_remember`` applies), capped at ``max_chars`` characters (None: no cap).

    Raises:
        ConfigError: Naming the first entry that is malformed, and how.
    """
    if isinstance(dump, str):
        try:
            dump = json.loads(dump)
        except json.JSONDecodeError as err:
            raise ConfigError(f"restore: the dump is not JSON ({err.msg} at {err.pos})") from err
    if not isinstance(dump, list):
        raise ConfigError(f"restore: the dump must be a list of entries, got {type(dump).__name__}")
    pairs: list[tuple[str, str]] = []
    for index, entry in enumerate(dump):
        if not isinstance(entry, dict):
            raise ConfigError(f"restore: entry {index} is a {type(entry).__name__}, not an object")
        key = entry.get("key", entry.get("id"))
        text = entry.get("content", entry.get("text"))
        if not isinstance(key, str) or not key:
            raise ConfigError(f"restore: entry {index} has no string 'key' (or 'id'): {key!r}")
        if not isinstance(text, str):
            raise ConfigError(
                f"restore: entry {index} ({key!r}) has no string 'content' (or 'text')"
            )
        try:
            pairs.append((validate_key(key), validate_memory_text(text, max_chars)))
        except ConfigError as err:
            raise ConfigError(f"restore: entry {index} ({key!r}): {err}") from err
    return pairs


async def restore(store: MemoryStore, dump: object, max_chars: int | None = None) -> RestoreReport:
    """Writes each dump text to the memory of its key (kept tags and importance; new if absent).

    Args:
        store: The store written to.
        dump: A list (or its JSON) of ``{key, content}`` or ``{id, text}``.
        max_chars: Longest text accepted (the server's cap); None: no cap.

    Raises:
        ConfigError: The dump is malformed, or a text is one ``memory_remember`` would refuse
            (nothing is written).
    """
    pairs = parse_dump(dump, max_chars)
    report = RestoreReport()
    path = getattr(store.backend, "path", None)
    if pairs and isinstance(path, str) and path != ":memory:":
        report.backup = await asyncio.to_thread(rotate_backups, path)
    for key, text in pairs:
        current = await store.get(key)
        if current is None:
            await store.remember(key, text)
            report.created.append(key)
        elif current.content == text:
            report.unchanged.append(key)
        else:
            meta = {k: v for k, v in current.meta.items() if k != COMPACTED_META}
            await store.write([replace(current, content=text, updated_at=store.clock(), meta=meta)])
            report.restored.append(key)
    return report


async def forget(store: MemoryStore, key: str) -> bool:
    """Forgets the memory ``key`` and deletes its archived originals; returns whether it existed.

    Forgetting a compacted memory forgets its text too: nothing left in the archive can be
    brought back by a later stub of the same key.

    Raises:
        ConfigError: A bad key.
        StorageError: The store or the archive failed (the memory is deleted first, so a
            failed archive delete leaves an unlinked row no stub resolves to).
    """
    existed = await store.forget(key)
    path = getattr(store.backend, "path", None)
    if isinstance(path, str) and path != ":memory:":
        await asyncio.to_thread(Archive(path).forget, store.backend.namespace, key)
    return existed


__all__ = [
    "CompactReport",
    "Probe",
    "RestoreReport",
    "compact",
    "forget",
    "model_version",
    "parse_dump",
    "probe",
    "restore",
    "specific_word",
]
