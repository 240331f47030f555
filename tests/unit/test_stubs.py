"""The public stub rules (``evermind.memory.stubs``) and the archive/backup helpers beside them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.errors import ConfigError
from evermind.memory.archive import LOST_NOTE, Archive, compacted_hash, rotate_backups, text_hash
from evermind.memory.stubs import MAX_FIRST_LINE, Stub, is_stub, make_stub, parse_stub


def test_stub_format_is_exact() -> None:
    assert make_stub("3", "The staging DB listens on 6543.") == (
        "[absorbed→Evermind v3] The staging DB listens on 6543."
    )
    assert make_stub(7, "x") == "[absorbed→Evermind v7] x"
    text = "\n\n   Deploys   happen\ton  Tuesdays  \nsecond line"
    assert make_stub("1.2.0", text) == "[absorbed→Evermind v1.2.0] Deploys happen on Tuesdays"


def test_first_line_is_capped_with_an_ellipsis() -> None:
    stub = make_stub("1", "word " * 100)
    quoted = stub.split("] ", 1)[1]
    assert len(quoted) == MAX_FIRST_LINE
    assert quoted.endswith("…")


def test_never_restubs_and_parses() -> None:
    stub = make_stub("2", "Alice owns billing.")
    assert is_stub(stub)
    assert parse_stub(stub) == Stub("2", "Alice owns billing.")
    with pytest.raises(ConfigError, match="refusing to stub a stub"):
        make_stub("3", stub)


@pytest.mark.parametrize(
    "text",
    [
        "plain text",
        "[absorbed→Evermind v2]",
        "[absorbed→Evermind v2] ",
        "[absorbed→Evermind v2] two\nlines",
        "[absorbed->Evermind v2] ascii arrow",
        "x [absorbed→Evermind v2] not at the start",
    ],
)
def test_non_stubs(text: str) -> None:
    assert not is_stub(text)
    assert parse_stub(text) is None


@pytest.mark.parametrize("version", ["", "-1", "v 2", "a" * 65, -1, 2.5, None])
def test_bad_versions_are_named(version: object) -> None:
    with pytest.raises(ConfigError, match="version"):
        make_stub(version, "text")  # type: ignore[arg-type]


def test_blank_text_has_no_stub() -> None:
    with pytest.raises(ConfigError, match="no visible character"):
        make_stub("1", " \n\t ")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,10}", fullmatch=True))
def test_any_stub_parses_back_and_is_one_line(text: str, version: str) -> None:
    try:
        stub = make_stub(version, text)
    except ConfigError:
        assert not text.split() or is_stub(text)
        return
    parsed = parse_stub(stub)
    assert parsed is not None and parsed.version == version
    assert len(stub.splitlines()) == 1
    assert make_stub(version, text) == stub  # deterministic


def test_archive_resolves_by_the_linked_content_hash(tmp_path: Path) -> None:
    memory = tmp_path / "memory.db"
    archive = Archive(memory)
    text, other = "original text\nsecond line", "original text\nanother second line"
    stub = make_stub("1", text)
    assert stub == make_stub("1", other)  # one first line, one stub
    link = {"compacted": {"model_version": "1", "sha256": text_hash(text)}}
    assert compacted_hash(link) == text_hash(text)
    assert archive.resolve("ns", "k", stub, link).lost
    assert LOST_NOTE in archive.resolve("ns", "k", stub, link).display()
    archive.put("ns", "k", text, stub)
    archive.put("ns", "k", text, stub)  # idempotent, never replaced
    archive.put("ns", "k", other, stub)  # newer, same stub: never read for the link to text
    assert archive.count("ns") == 2
    resolved = archive.resolve("ns", "k", stub, link)
    assert (resolved.text, resolved.stub, resolved.lost) == (text, stub, False)
    assert archive.resolve("ns", "k", stub, None).lost  # no link: a typed stub line
    assert archive.resolve("ns", "k", stub, {"compacted": "x"}).lost  # a malformed link
    assert archive.resolve("ns", "k", make_stub("1", "elsewhere"), link).lost  # not its quote
    assert archive.resolve("other", "k", stub, link).lost  # namespaced
    assert archive.resolve("ns", "k", "not a stub", None).stub is None
    assert archive.forget("ns", "k") == 2 and archive.count("ns") == 0
    assert archive.resolve("ns", "k", stub, link).lost  # forgotten: nothing resurrects it
    assert archive.path == tmp_path / "memory.db.archive.sqlite"


def test_rotate_backups_keeps_three(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    assert rotate_backups(db) is None
    for generation in range(5):
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS t (g INTEGER)")
            conn.execute("DELETE FROM t")
            conn.execute("INSERT INTO t VALUES (?)", (generation,))
        conn.close()
        assert rotate_backups(db) == Path(f"{db}.bak.1")
    seen = []
    for index in (1, 2, 3):
        with sqlite3.connect(f"{db}.bak.{index}") as conn:
            seen.append(conn.execute("SELECT g FROM t").fetchone()[0])
        conn.close()
    assert seen == [4, 3, 2]
    assert not Path(f"{db}.bak.4").exists()
