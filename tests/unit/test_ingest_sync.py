"""Diff-sync into a real SQLite-backed MemoryStore: the issue's proof, and the edges around it.

A folder of mixed Markdown/HTML/CSV/JSONL (a fake product's docs, FAQ, tickets and
changelog: a few hundred chunks) is ingested; one file is changed and re-ingested (only its
new texts are embedded, counted by the embedder itself); it is deleted (its chunks and its
manifest are forgotten); recall finds chunks of the right source with their breadcrumbs.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from evermind import ingest
from evermind.errors import InputError
from evermind.ingest import Chunker, Document, ParseOptions, ParserRegistry, Section
from evermind.ingest.manifest import MANIFEST_PREFIX, manifest_key
from evermind.ingest.registry import PARSERS
from evermind.memory import MemoryStore
from evermind.tokenizer import Tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"
CONFIG = "kb/docs/configuration.md"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class CountingEmbedder:
    """A deterministic embedder that counts every text it is asked to embed."""

    fingerprint = "counting-v1"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        out = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            out.append([b / 255 + 0.01 for b in digest[:16]])
        return out


def knowledge_base(tmp_path: Path) -> Path:
    """The fixtures copied to ``tmp_path/kb``, plus files a walk must skip."""
    kb = tmp_path / "kb"
    shutil.copytree(FIXTURES, kb)
    (kb / ".draft.md").write_text("# Secret draft\n\nnot for memory\n")
    (kb / ".git").mkdir()
    (kb / ".git" / "config.md").write_text("# hidden folder\n")
    (kb / "logo.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (kb / "slides.pptx").write_bytes(b"PK\x03\x04")
    return kb


def chunk_contents(path: Path, source: str, chunker: Chunker) -> set[str]:
    name = PARSERS.name_for(path.name)
    assert name is not None
    doc = PARSERS.get(name)(path.read_text(), source, ParseOptions())
    return {c.content for c in chunker.chunk(doc)}


def keys_of(store: MemoryStore, source: str) -> set[str]:
    run(store.refresh())
    records = store.snapshot().records
    return {k for k, r in records.items() if r.meta.get("source") == source and not r.archived}


def test_ingest_change_one_file_then_delete_it(tmp_path: Path) -> None:
    kb = knowledge_base(tmp_path)
    chunker = Chunker(size=64, overlap=12)
    embedder = CountingEmbedder()
    store = MemoryStore(tmp_path / "memory.db", embedder)

    first = run(ingest.sync(store, [kb], base=tmp_path, chunker=chunker))
    print(first.to_dict())
    assert first.sources == 8 and first.added == first.chunks >= 200
    assert first.updated == first.deleted == first.unchanged == 0
    assert sorted(first.skipped) == [
        ("kb/logo.md", "binary (a NUL byte in its first 8 KiB)"),
        ("kb/slides.pptx", "unknown type .pptx"),
    ]
    stored = run(store.export())
    assert not any("Secret draft" in e["content"] or "hidden" in e["content"] for e in stored)
    assert run(store.count()) == first.chunks  # manifests are archived: not counted
    contents = {e["content"] for e in stored if not e["archived"]}
    assert first.embeds == len(embedder.texts) == len(contents)  # each distinct text once

    # Nothing changed: nothing parsed again, written or embedded.
    version = run(store.version())
    again = run(ingest.sync(store, [kb], base=tmp_path, chunker=chunker))
    assert (again.added, again.updated, again.deleted, again.embeds) == (0, 0, 0, 0)
    assert again.unchanged == first.chunks and again.changed_sources == []
    assert run(store.version()) == version

    # Change one paragraph of one file and add a section to it.
    config = kb / "docs" / "configuration.md"
    before = chunk_contents(config, CONFIG, chunker)
    text = config.read_text()
    assert "The default base delay\nis 2 seconds" in text
    text = text.replace(
        "The default base delay\nis 2 seconds", "The default base delay\nis 5 seconds"
    )
    config.write_text(text + "\n## Metrics\n\nPrometheus metrics are served on /metrics.\n")
    after = chunk_contents(config, CONFIG, chunker)
    fresh = after - before
    embedded = len(embedder.texts)
    changed = run(ingest.sync(store, [kb], base=tmp_path, chunker=chunker))
    print(changed.to_dict())
    assert changed.changed_sources == [CONFIG]
    assert 2 <= len(fresh) <= 4  # the changed paragraph's chunk(s) and the new section
    assert changed.embeds == len(fresh) == len(embedder.texts) - embedded
    assert set(embedder.texts[embedded:]) == fresh  # exactly the new texts, nothing else
    assert changed.unchanged >= first.chunks - len(before)  # every other source untouched
    assert changed.added >= 1  # the new section
    assert {run(store.get(k)).content for k in keys_of(store, CONFIG)} == after  # type: ignore[union-attr]

    # Delete it: its chunks and its manifest go; everything else stays.
    config.unlink()
    count = run(store.count())
    gone = run(ingest.sync(store, [kb], base=tmp_path, chunker=chunker))
    assert gone.forgotten == [CONFIG] and gone.deleted == len(after) and gone.embeds == 0
    assert keys_of(store, CONFIG) == set()
    assert run(store.get(manifest_key(CONFIG))) is None
    assert run(store.count()) == count - len(after)
    assert CONFIG not in {m.source for m in run(ingest.sources(store))}
    run(store.close())

    # Reopened from disk: the manifests and the cached vectors persisted.
    reopened_embedder = CountingEmbedder()
    reopened = MemoryStore(tmp_path / "memory.db", reopened_embedder)
    last = run(ingest.sync(reopened, [kb], base=tmp_path, chunker=chunker))
    assert last.embeds == 0 and last.changed_sources == [] and last.unchanged == gone.chunks
    run(reopened.close())


QUESTIONS = [
    ("install on Linux with the systemd unit", "kb/docs/getting-started.md", "Install > Linux"),
    ("can I get a refund after I cancel", "kb/faq.html", "Billing > Can I get a refund?"),
    ("client exit code when the server is unreachable", "kb/docs/cli.md", "Exit codes"),
    ("default retry base delay backoff cap", CONFIG, "Configuration > Retries and backoff"),
    ("Flask endpoint rejects every dead-letter webhook", "kb/tickets.csv", ""),
]


@pytest.fixture(scope="module")
def recall_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("recall")
    shutil.copytree(FIXTURES, tmp / "kb")
    store = MemoryStore(tmp / "memory.db")  # lexical recall: deterministic
    options = ParseOptions(columns=("subject", "body"), fields=("title", "notes"))
    run(ingest.sync(store, [tmp / "kb"], base=tmp, chunker=Chunker(64, 12), options=options))
    run(store.close())
    return tmp / "memory.db"


@pytest.mark.parametrize("question, source, crumb", QUESTIONS)
def test_recall_finds_the_right_source_with_breadcrumbs(
    recall_store: Path, question: str, source: str, crumb: str
) -> None:
    async def ask() -> list[Any]:
        async with MemoryStore(recall_store) as store:
            return await store.recall(question, top_k=3, tags=["ingest"])

    hits = run(ask())
    top = hits[0]
    print(question, "->", [(h.key, h.meta["breadcrumb"]) for h in hits])
    assert top.meta["source"] == source
    assert top.meta["breadcrumb"].endswith(crumb)
    if crumb:
        assert top.content.startswith(top.meta["breadcrumb"] + "\n\n")
    else:
        assert top.meta["fields"]["id"] == "LF-1042" and top.meta["line"] == 43
    assert not any(h.key.startswith(MANIFEST_PREFIX) for h in hits)


def test_forget_removes_a_source_and_everything_from_it(tmp_path: Path) -> None:
    kb = knowledge_base(tmp_path)
    store = MemoryStore(tmp_path / "m.db")
    run(ingest.sync(store, [kb / "docs"], base=tmp_path))
    source = "kb/docs/cli.md"
    held = keys_of(store, source)
    assert held
    assert run(ingest.forget(store, source)) == len(held)
    assert keys_of(store, source) == set() and run(store.get(manifest_key(source))) is None
    assert run(ingest.forget(store, source)) == 0
    assert keys_of(store, "kb/docs/api.md")  # others stay


def test_a_chunk_lost_from_the_store_is_restored_without_embedding(tmp_path: Path) -> None:
    kb = knowledge_base(tmp_path)
    embedder = CountingEmbedder()
    store = MemoryStore(tmp_path / "m.db", embedder)
    run(ingest.sync(store, [kb / "docs" / "api.md"], base=tmp_path))
    victim = sorted(keys_of(store, "kb/docs/api.md"))[0]
    run(store.forget(victim))  # by hand, or evicted by capacity
    report = run(ingest.sync(store, [kb / "docs" / "api.md"], base=tmp_path))
    assert report.updated == 1 and report.embeds == 0  # the vector was cached
    assert run(store.get(victim)) is not None


def test_a_metadata_only_change_rewrites_without_embedding(tmp_path: Path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(
        "id,status,body\nA-1,open,the disk is full again\nA-2,open,jobs run twice\n"
    )
    embedder = CountingEmbedder()
    store = MemoryStore(tmp_path / "m.db", embedder)
    options = ParseOptions(columns=("body",))
    run(ingest.sync(store, [csv_path], base=tmp_path, options=options))
    csv_path.write_text(
        "id,status,body\nA-1,solved,the disk is full again\nA-2,open,jobs run twice\n"
    )
    report = run(ingest.sync(store, [csv_path], base=tmp_path, options=options))
    assert (report.updated, report.unchanged, report.embeds) == (1, 1, 0)
    (hit,) = run(store.recall("disk full", top_k=1))
    assert hit.meta["fields"] == {"id": "A-1", "status": "solved"}


def test_documents_from_rows_diff_by_position(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    store = MemoryStore(tmp_path / "m.db", embedder)
    rows = [{"title": f"ticket number {i} is about queues"} for i in range(3)]
    first = run(ingest.sync_documents(store, [ingest.parse_rows(rows, "query-7")]))
    assert (first.added, first.embeds) == (3, 3)
    rows[1] = {"title": "ticket number one is about leases"}
    changed = run(ingest.sync_documents(store, [ingest.parse_rows(rows[:2], "query-7")]))
    assert (changed.updated, changed.deleted, changed.unchanged, changed.embeds) == (1, 1, 1, 1)
    assert len(keys_of(store, "query-7")) == 2
    # A folder sync never prunes sources that did not come from files.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\ntext\n")
    run(ingest.sync(store, [tmp_path], base=tmp_path))
    assert len(keys_of(store, "query-7")) == 2


def test_bad_files_stop_the_sync_or_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nfine\n")
    (tmp_path / "b.jsonl").write_text('{"text": "ok line"}\n{"text": broken}\n')
    (tmp_path / "c.txt").write_bytes(b"caf\xe9\n")
    store = MemoryStore(tmp_path / "m.db")
    with pytest.raises(InputError, match=r"b\.jsonl: line 2: bad JSON"):
        run(ingest.sync(store, [tmp_path], base=tmp_path, errors="raise"))
    report = run(ingest.sync(store, [tmp_path], base=tmp_path))  # by default: each alone
    reasons = dict(report.failed)
    assert "line 2: bad JSON" in reasons["b.jsonl"]
    assert "line 1: undecodable bytes" in reasons["c.txt"]
    assert report.sources == 3 and report.ok == 1 and keys_of(store, "a.md")
    with pytest.raises(InputError, match="no such file or folder"):
        run(ingest.sync(store, [tmp_path / "missing.md"], base=tmp_path))
    with pytest.raises(InputError, match=r"unknown type \.pptx"):
        (tmp_path / "s.pptx").write_text("x")
        run(ingest.sync(store, [tmp_path / "s.pptx"], base=tmp_path, errors="raise"))
    report = run(ingest.sync(store, [tmp_path / "s.pptx"], base=tmp_path))
    assert dict(report.failed) == {"s.pptx": "unknown type .pptx"} and report.ok == 0


def test_a_registered_parser_and_a_forced_parser_are_used(tmp_path: Path) -> None:
    registry = ParserRegistry()

    def parse_org(text: str, source: str, options: ParseOptions) -> Document:
        parts = [p.strip() for p in text.split("* ") if p.strip()]
        return Document(source, "org", tuple(Section(p, ("Org", p.split()[0])) for p in parts))

    registry.register("org", parse_org, [".org"])
    registry.register("text", PARSERS.get("text"), [".txt"])
    (tmp_path / "plan.org").write_text("* alpha tasks\n* beta tasks\n")
    (tmp_path / "notes.cfg").write_text("key = value\n")
    store = MemoryStore(tmp_path / "m.db")
    report = run(ingest.sync(store, [tmp_path / "plan.org"], base=tmp_path, registry=registry))
    assert report.added == 2
    (hit,) = run(store.recall("beta", top_k=1))
    assert hit.meta["breadcrumb"] == "Org > beta" and hit.meta["kind"] == "org"
    forced = run(ingest.sync(store, [tmp_path / "notes.cfg"], base=tmp_path, parser="text"))
    assert forced.added == 1


def test_manifests_travel_with_export_and_import(tmp_path: Path) -> None:
    kb = knowledge_base(tmp_path)
    store = MemoryStore(tmp_path / "a.db")
    first = run(ingest.sync(store, [kb / "docs"], base=tmp_path))
    exported = run(store.export())
    assert sum(e["key"].startswith(MANIFEST_PREFIX) for e in exported) == 5
    copy = MemoryStore(tmp_path / "b.db")
    run(copy.import_(exported))
    report = run(ingest.sync(copy, [kb / "docs"], base=tmp_path))
    assert report.unchanged == first.chunks and report.changed_sources == []


def test_named_bytes_sync_like_files_and_are_never_pruned(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    store = MemoryStore(tmp_path / "m.db", embedder)
    faq = (FIXTURES / "faq.html").read_bytes()
    notes = "# Notes\n\nDropped in the Data panel.\n"
    first = run(ingest.sync_bytes(store, [("faq.html", faq), ("notes.md", notes)]))
    assert first.sources == 2 and first.added == first.chunks > 2
    again = run(ingest.sync_bytes(store, [("faq.html", faq), ("notes.md", notes)]))
    assert again.changed_sources == [] and again.embeds == 0
    changed = run(ingest.sync_bytes(store, [("notes.md", notes.replace("Data", "Files"))]))
    assert (changed.updated, changed.embeds) == (1, 1)
    (tmp_path / "docs").mkdir()
    run(ingest.sync(store, [tmp_path / "docs"], base=tmp_path))
    run(ingest.sync(store, [tmp_path], base=tmp_path))
    assert keys_of(store, "faq.html") and keys_of(store, "notes.md")  # uploads stay
    report = run(ingest.sync_bytes(store, [("deck.key", b"x")], errors="skip"))
    assert "unknown type .key" in report.skipped[0][1]


def test_new_chunker_settings_re_chunk_and_cached_texts_are_not_re_embedded(
    tmp_path: Path,
) -> None:
    kb = knowledge_base(tmp_path)
    embedder = CountingEmbedder()
    store = MemoryStore(tmp_path / "m.db", embedder)
    docs = [kb / "docs"]
    first = run(ingest.sync(store, docs, base=tmp_path, chunker=Chunker(64, 12)))
    smaller = run(ingest.sync(store, docs, base=tmp_path, chunker=Chunker(32, 4)))
    assert len(smaller.changed_sources) == 5 and smaller.chunks > first.chunks
    assert smaller.embeds > 0
    back = run(ingest.sync(store, docs, base=tmp_path, chunker=Chunker(64, 12)))
    assert back.chunks == first.chunks and back.embeds == 0  # every text's vector is cached
    tokenizer = Tokenizer.train((kb / "docs" / "cli.md").read_text(), 400)
    tokens = run(ingest.sync(store, docs, base=tmp_path, chunker=Chunker(64, 12, tokenizer)))
    assert tokens.unit == "tokens" and len(tokens.changed_sources) == 5
    (hit,) = run(store.recall("exit code unreachable", top_k=1))
    assert hit.meta["unit"] == "tokens" and hit.meta["units"] <= 64
