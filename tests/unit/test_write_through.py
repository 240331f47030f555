"""Write-through cognition on an in-memory store: subject keys, evidence, history, concurrency.

What each test proves is in its name; the store is the real ``MemoryStore`` (BM25 recall) on
``InMemoryBackend``, and the evidence gatherers are the shipped ones on a tmp workspace and a
loopback HTTP server, or a stub that answers a fixed verdict.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.errors import ConfigError, VersionConflict
from evermind.memory import InMemoryBackend, InMemoryHub, MemoryRecord, MemoryStore
from evermind.memory.cognition import Fact
from evermind.memory.evidence import (
    AllGatherers,
    Evidence,
    HttpProbeGatherer,
    WorkspacePresenceGatherer,
)
from evermind.memory.kv_backend import KVMemoryBackend
from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.memory.subject import fold_key, same_subject, values
from evermind.memory.vector_backend import SIGNATURE_DIM, VectorStoreBackend
from evermind.memory.write_through import Remember, history, remember_through
from evermind.studio.storage import MemoryKV
from evermind.vectorstore import open_store
from tests.unit.test_memory_helpers import run


class Verdict:
    """A gatherer that always answers ``supports`` (and counts its calls)."""

    def __init__(self, supports: bool | None, detail: str = "stub") -> None:
        self.evidence = Evidence(supports, detail)
        self.calls = 0

    async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
        self.calls += 1
        return self.evidence


def store() -> MemoryStore:
    return MemoryStore(InMemoryBackend("t/ns"))


OLD = "staging deploys on port 8080"
NEW = "staging now deploys on 9090"


def test_fold_key_folds_case_and_separators_not_dotted_order() -> None:
    assert fold_key("Staging_Port") == fold_key("staging-port") == fold_key("staging.port")
    assert fold_key("staging  port") == "staging port"
    assert fold_key("port.staging") != fold_key("staging.port")


def test_same_subject_rule_links_a_changed_value_only() -> None:
    match = same_subject("deploy.staging.port", NEW, "staging-port", OLD)
    assert match is not None and match.old_values == ("8080",) and match.new_values == ("9090",)
    # Another subject word (prod vs staging): not linked.
    assert same_subject("prod-port", "prod deploys on port 443", "staging-port", OLD) is None
    # A numbered series in the keys is distinct instances, not one subject.
    assert same_subject("step-2", "step 2 of the deploy", "step-1", "step 1 of the deploy") is None
    # No value changed (a rephrasing with the same value): not a conflict.
    assert same_subject("staging.port", "port 8080 serves staging", "staging-port", OLD) is None
    assert values("Niamh uses Neovim 0.10 from /opt/nvim, see `init.lua`") == {
        "neovim",
        "0.10",
        "/opt/nvim",
        "init.lua",
    }


def test_drift_without_evidence_is_contested_and_both_kept() -> None:
    async def body() -> None:
        memory = store()
        first = await remember_through(memory, Remember.of("staging-port", OLD))
        assert first.action == "augment" and "augmented" in first.summary
        second = await remember_through(memory, Remember.of("deploy.staging.port", NEW))
        assert second.action == "contested", second.summary
        assert second.summary.startswith("contested: 'staging-port' holds 8080; kept both")
        assert second.record is not None
        assert second.record.meta["cognition"]["contested_with"] == "staging-port"
        incumbent = await memory.get("staging-port")
        assert incumbent is not None
        assert incumbent.meta["cognition"]["contested_by"] == "deploy.staging.port"
        hits = {h.key: h for h in await memory.recall("staging port", top_k=5)}
        assert set(hits) == {"staging-port", "deploy.staging.port"}
        assert hits["deploy.staging.port"].meta["cognition"]["action"] == "contested"

    run(body())


def test_drift_with_supporting_evidence_supersedes_with_history() -> None:
    async def body() -> None:
        memory = store()
        await remember_through(memory, Remember.of("staging-port", OLD))
        gatherer = Verdict(True, "deploy/staging.env contains 9090")
        outcome = await remember_through(memory, Remember.of("deploy.staging.port", NEW), gatherer)
        assert outcome.action == "supersede", outcome.summary
        assert outcome.summary == (
            "superseded 'staging-port' by 'deploy.staging.port' 8080 → 9090 "
            "(evidence: deploy/staging.env contains 9090)"
        )
        assert await memory.get("staging-port") is None
        assert [h.key for h in await memory.recall("staging port", top_k=5)] == [
            "deploy.staging.port"
        ]
        (old,) = await history(memory, "deploy.staging.port")
        assert old.content == OLD and old.archived and old.key == outcome.archived_key
        assert old.meta["superseded_by"] == "deploy.staging.port"
        # Learned: the old key is now an alias; writing under it again finds the fact.
        third = await remember_through(memory, Remember.of("staging-port", "staging on 7070"))
        assert third.action == "supersede" and third.incumbent is not None
        assert third.incumbent.key == "deploy.staging.port"
        assert [r.content for r in await history(memory, "staging-port")] == [NEW, OLD]

    run(body())


def test_evidence_against_rejects_and_writes_nothing() -> None:
    async def body() -> None:
        memory = store()
        await remember_through(memory, Remember.of("staging-port", OLD))
        before = await memory.export()
        outcome = await remember_through(
            memory, Remember.of("deploy.staging.port", NEW), Verdict(False, "8080 answers")
        )
        assert outcome.action == "reject" and outcome.record is None
        assert "evidence is against it: 8080 answers" in outcome.summary
        assert await memory.export() == before

    run(body())


def test_same_key_rewrite_supersedes_confirm_and_put() -> None:
    async def body() -> None:
        memory = store()
        await remember_through(memory, Remember.of("editor", "Niamh uses Neovim"))
        again = await remember_through(memory, Remember.of("Editor", "niamh uses neovim."))
        assert again.action == "confirm" and again.key == "editor"
        changed = await remember_through(memory, Remember.of("editor", "Niamh uses Helix"))
        assert changed.action == "supersede" and "neovim → helix" in changed.summary
        assert [r.content for r in await history(memory, "editor")] == ["Niamh uses Neovim"]
        # Evidence against a same-key change still rejects it.
        refused = await remember_through(
            memory, Remember.of("editor", "Niamh uses Emacs"), Verdict(False)
        )
        assert refused.action == "reject"
        put = await remember_through(memory, Remember.of("editor", "Niamh uses Emacs"), mode="put")
        assert put.action == "put" and put.summary == "put: replaced 'editor'"
        # A put archives nothing, but the key's earlier history stays linked.
        assert [r.content for r in await history(memory, "editor")] == ["Niamh uses Neovim"]
        with pytest.raises(ConfigError, match="mode"):
            await remember_through(memory, Remember.of("k", "v"), mode="merge")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"meta\.cognition"):
            Remember.of("k", "v", meta={"cognition": 1})

    run(body())


def test_the_same_text_under_another_key_confirms_instead_of_a_copy() -> None:
    async def body() -> None:
        memory = store()
        await remember_through(memory, Remember.of("pkg-manager", "We use uv, not pip."))
        again = await remember_through(
            memory, Remember.of("instruction-3fa9", "we use uv, not pip")
        )
        assert again.action == "confirm" and again.key == "pkg-manager"
        assert again.summary == (
            "confirmed 'pkg-manager': the same fact again (already stored under 'pkg-manager')"
        )
        assert await memory.count() == 1

    run(body())


def test_declared_alias_supersedes_without_evidence() -> None:
    async def body() -> None:
        memory = store()
        await remember_through(memory, Remember.of("wifi", "The office wifi password is Tern42"))
        outcome = await remember_through(
            memory,
            Remember.of("office.network.secret", "Guest code: Heron7", aliases=["wifi"]),
        )
        assert outcome.action == "supersede" and outcome.incumbent is not None
        assert outcome.incumbent.key == "wifi"

    run(body())


def test_unrelated_and_numbered_writes_augment() -> None:
    async def body() -> None:
        memory = store()
        for n in range(4):
            text = f"deploy step {n}: the staging cluster restarts"
            outcome = await remember_through(memory, Remember.of(f"deploy-{n}", text))
            assert outcome.action == "augment", outcome.summary
        assert await memory.count() == 4

    run(body())


def test_tenants_never_see_each_other() -> None:
    async def body() -> None:
        hub = InMemoryHub()
        alice = MemoryStore(InMemoryBackend("alice/default", hub))
        bob = MemoryStore(InMemoryBackend("bob/default", hub))
        await remember_through(alice, Remember.of("staging-port", OLD))
        outcome = await remember_through(bob, Remember.of("deploy.staging.port", NEW))
        assert outcome.action == "augment" and outcome.incumbent is None

    run(body())


def test_concurrent_writers_on_one_store_serialise() -> None:
    """Two writers at once: one augments, the other sees it (never two unrelated augments)."""

    async def body() -> None:
        memory = store()
        slow = Verdict(None)
        results = await asyncio.gather(
            remember_through(memory, Remember.of("staging-port", OLD), slow),
            remember_through(memory, Remember.of("deploy.staging.port", NEW), slow),
        )
        assert sorted(o.action for o in results) == ["augment", "contested"]

    run(body())


def test_two_stores_on_one_namespace_retake_a_stale_decision() -> None:
    """A writer through another store object lands between decision and write: retaken."""

    async def body() -> None:
        hub = InMemoryHub()
        mine = MemoryStore(InMemoryBackend("t/ns", hub))
        theirs = MemoryStore(InMemoryBackend("t/ns", hub))

        class Interloper:
            fired = False

            async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
                if not self.fired:
                    self.fired = True
                    await theirs.remember("staging-port", "staging deploys on port 7070")
                return Evidence(True, "checked")

        await mine.remember("staging-port", OLD)
        outcome = await remember_through(mine, Remember.of("staging-port", NEW), Interloper())
        assert outcome.action == "supersede"
        assert outcome.incumbent is not None and "7070" in outcome.incumbent.content
        assert [r.content for r in await history(mine, "staging-port")] == [
            "staging deploys on port 7070"
        ]

    run(body())


def test_workspace_gatherer_reads_only_under_its_root(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "deploy").mkdir(parents=True)
    (root / "deploy" / "staging.env").write_text("PORT=9090\n")
    (tmp_path / "outside.env").write_text("PORT=9090\n")
    gatherer = WorkspacePresenceGatherer(root)
    incumbent = MemoryRecord("staging-port", "staging deploys on port 8080")

    def gather(text: str) -> Evidence:
        return run(gatherer.gather(Fact(text, "k"), incumbent))

    yes = gather("staging deploys on 9090 (see deploy/staging.env)")
    assert yes.supports is True and "deploy/staging.env contains 9090" in yes.detail
    (root / "deploy" / "staging.env").write_text("PORT=8080\n")
    no = gather("staging deploys on 9090 (see deploy/staging.env)")
    assert no.supports is False and "contains 8080, not 9090" in no.detail
    missing = gather("staging config moved to deploy/gone.env")
    assert missing.supports is False and "does not exist" in missing.detail
    assert gather("staging deploys on 9090").supports is None  # names no file
    for escape in ("../outside.env", str(tmp_path / "outside.env")):
        assert gather(f"staging on 9090 per {escape}").supports is None, escape
    (root / "link.env").symlink_to(tmp_path / "outside.env")
    assert gather("staging on 9090 per link.env").supports is None


@pytest.fixture()
def loopback() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_probe_gatherer_on_loopback(loopback: str) -> None:
    probe = HttpProbeGatherer(timeout=2.0)

    def gather(text: str) -> Evidence:
        return run(probe.gather(Fact(text, "k"), None))

    assert gather(f"staging health is at {loopback}/health").supports is True
    missing = gather(f"staging health is at {loopback}/nope")
    assert missing.supports is False and "404" in missing.detail
    assert gather("no address here").supports is None
    both = AllGatherers([Verdict(True, "file ok"), probe])
    assert run(both.gather(Fact(f"see {loopback}/nope", "k"), None)).supports is False


def test_folded_keys_found_after_own_and_foreign_writes() -> None:
    """The subject index follows our writes and rebuilds after another writer's."""

    async def body() -> None:
        hub = InMemoryHub()
        mine = MemoryStore(InMemoryBackend("t/ns", hub))
        theirs = MemoryStore(InMemoryBackend("t/ns", hub))
        await remember_through(mine, Remember.of("Staging_Port", OLD))
        folded = await remember_through(mine, Remember.of("staging.port", NEW))
        assert folded.action == "supersede" and folded.incumbent is not None
        assert folded.incumbent.key == "Staging_Port"
        await theirs.remember("editor-choice", "Niamh uses Neovim")
        found = await remember_through(mine, Remember.of("Editor Choice", "Niamh uses Helix"))
        assert found.action == "supersede" and found.incumbent is not None
        assert found.incumbent.key == "editor-choice"
        await theirs.remember("short-lived", "gone soon", ttl=0.05)
        await asyncio.sleep(0.1)
        expired = await remember_through(mine, Remember.of("short.lived", "still here"))
        assert expired.action == "augment"

    run(body())


@pytest.mark.parametrize("kind", ["inmemory", "sqlite", "kv", "vector"])
def test_a_write_expecting_a_stale_version_or_key_writes_nothing(kind: str, tmp_path: Path) -> None:
    """The compare-and-set write-through relies on, in each transactional backend."""

    async def body() -> None:
        if kind == "sqlite":
            mine = MemoryStore(SQLiteBackend(tmp_path / "m.db", "t/ns"))
            theirs = MemoryStore(SQLiteBackend(tmp_path / "m.db", "t/ns"))  # another connection
        elif kind == "vector":
            engine = await open_store("memory://", dim=SIGNATURE_DIM)
            mine = MemoryStore(VectorStoreBackend(engine, "ns", tenant="t"))
            theirs = MemoryStore(VectorStoreBackend(engine, "ns", tenant="t"))
        elif kind == "kv":
            kv = MemoryKV()
            mine, theirs = MemoryStore(KVMemoryBackend(kv)), MemoryStore(KVMemoryBackend(kv))
        else:
            hub = InMemoryHub()
            mine = MemoryStore(InMemoryBackend("t/ns", hub))
            theirs = MemoryStore(InMemoryBackend("t/ns", hub))
        seen = await mine.version()
        await theirs.remember("other", "written in between")
        with pytest.raises(VersionConflict, match="expected version"):
            await mine.write([MemoryRecord("k", "stale decision")], expect_version=seen)
        assert await mine.get("k") is None
        # Per key: another key written meanwhile does not matter, the key itself does.
        await mine.write([MemoryRecord("k", "decided on keys")], expect_keys={"k": None})
        written = await mine.get("k")
        assert written is not None
        await theirs.write([MemoryRecord("k", "theirs", updated_at=written.updated_at + 1)])
        with pytest.raises(VersionConflict, match="key 'k'"):
            await mine.write([MemoryRecord("k", "stale")], expect_keys={"k": written.updated_at})
        fresh = await mine.version()
        result = await mine.write([MemoryRecord("k", "fresh decision")], expect_version=fresh)
        assert result.version == fresh + 1
        await mine.close()
        await theirs.close()

    run(body())


def test_a_namespace_that_keeps_moving_refuses_the_write() -> None:
    """Every decision is overtaken by another writer: nothing is written on a stale one."""

    async def body() -> None:
        hub = InMemoryHub()
        mine = MemoryStore(InMemoryBackend("t/ns", hub))
        theirs = MemoryStore(InMemoryBackend("t/ns", hub))

        class Busy:
            rounds = 0

            async def gather(self, fact: Fact, incumbent: MemoryRecord | None) -> Evidence:
                self.rounds += 1  # another writer rewrites the very memory being replaced
                await theirs.remember("staging-port", f"staging deploys on port {self.rounds}")
                return Evidence(True, "checked")

        await mine.remember("staging-port", OLD)
        busy = Busy()
        with pytest.raises(VersionConflict, match="during each of 6 decisions"):
            await remember_through(mine, Remember.of("staging-port", NEW), busy)
        assert busy.rounds == 6
        current = await mine.get("staging-port")
        assert current is not None and current.content == "staging deploys on port 6"

    run(body())


def test_unrelated_writers_in_other_connections_never_refuse_a_write(tmp_path: Path) -> None:
    """Three SQLite connections write at once: every write lands (keys, not the namespace)."""

    async def body() -> None:
        path = tmp_path / "m.db"
        stores = [MemoryStore(SQLiteBackend(path, "t/ns")) for _ in range(3)]

        async def writer(n: int, memory: MemoryStore) -> list[str]:
            actions = []
            for i in range(40):
                text = f"writer {n} wrote memory {i}"
                outcome = await remember_through(memory, Remember.of(f"w{n}-{i:03d}", text))
                actions.append(outcome.action)
            return actions

        results = await asyncio.gather(*(writer(n, s) for n, s in enumerate(stores)))
        assert all(a == "augment" for actions in results for a in actions)
        assert len(await stores[0].export()) == 120
        for memory in stores:
            await memory.close()

    run(body())


def test_values_skip_sentence_starts_and_the_one_letter_pronoun() -> None:
    assert values("Then I moved staging to 9090 with Bob. Next week too") == {"9090", "bob"}
