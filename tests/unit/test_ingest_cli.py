"""``evermind ingest`` through ``main()``: a temporary SQLite store, sync, re-sync, forget, list."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from evermind.cli import main
from evermind.cli.ingest import store_path
from evermind.errors import ConfigError
from evermind.memory import MemoryStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"


def ingest(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    code = main(["ingest", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code in (0, 1) else {}), err  # 1: some file failed


def test_cli_ingests_re_ingests_forgets_and_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES, tmp_path / "kb")
    db = tmp_path / "memory.db"
    common = ["--store", str(db), "--size", "64", "--overlap", "12", "--embedder", "terms"]

    code, first, err = ingest(capsys, "kb", *common, "--columns", "subject,body")
    assert code == 0, err
    assert first["sources"] == 8 and first["added"] == first["chunks"] >= 200
    assert first["embeds"] > 0 and first["unit"] == "words"
    assert first["namespace"] == "default/default" and first["store"] == str(db)
    assert "ingest: 8 sources" in err and "chunks/s" in err

    code, again, _ = ingest(capsys, "kb", *common, "--columns", "subject,body")
    assert (again["added"], again["updated"], again["embeds"]) == (0, 0, 0)
    assert again["unchanged"] == first["chunks"]

    code, listed, _ = ingest(capsys, "--list", "--store", f"sqlite:///{db}")
    assert [s["source"] for s in listed["sources"]][:2] == ["kb/changelog.jsonl", "kb/docs/api.md"]
    faq = next(s for s in listed["sources"] if s["source"] == "kb/faq.html")
    assert faq["kind"] == "html" and faq["title"] == "Lanternfish FAQ" and faq["chunks"] > 0

    code, forgot, _ = ingest(capsys, "--forget", "kb/faq.html", "--store", str(db))
    assert forgot["forgot"] == {"kb/faq.html": faq["chunks"]}

    async def recall() -> list[str]:
        async with MemoryStore(db, namespace="default/default") as store:
            return [h.meta["source"] for h in await store.recall("refund", top_k=5)]

    assert "kb/faq.html" not in asyncio.run(recall())

    # Another tenant's namespace is its own.
    code, other, _ = ingest(capsys, "kb/docs/cli.md", "--store", str(db), "--tenant", "acme")
    assert other["namespace"] == "acme/default" and other["added"] > 0


def test_cli_errors_exit_2_with_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": nope}\n')
    code, _, err = ingest(
        capsys, str(bad), "--store", str(tmp_path / "m.db"), "--base", str(tmp_path), "--fail-fast"
    )
    assert code == 2 and "error: bad.jsonl: line 2: bad JSON" in err
    code, _, err = ingest(capsys, "--store", str(tmp_path / "m.db"))
    assert code == 2 and "expected PATH..., --forget SOURCE or --list" in err
    (tmp_path / "good.md").write_text("# Good\n\nthis one is fine\n")
    for flags in ([], ["--keep-going"]):  # failing alone is the default; the old flag says so
        code, report, err = ingest(
            capsys,
            str(tmp_path),
            "--store",
            str(tmp_path / "m.db"),
            "--base",
            str(tmp_path),
            *flags,
        )
        failed, skipped = dict(report["failed"]), dict(report["skipped"])
        assert code == 1 and "line 2: bad JSON" in failed["bad.jsonl"]  # reported by its id
        assert skipped["m.db"] == "unknown type .db"  # the store itself is not a document
        assert report["ok"] == 1 and "failed bad.jsonl: " in err


def test_store_urls() -> None:
    assert store_path("sqlite:////tmp/x.db") == Path("/tmp/x.db")
    assert store_path("sqlite:///rel.db") == Path("rel.db").absolute()
    assert store_path("postgresql://db/lantern") == "postgresql://db/lantern"
    assert store_path("memory://") == "memory://"
    with pytest.raises(ConfigError, match=r"'mysql://db/x' is not a store .*sqlite:///PATH"):
        store_path("mysql://db/x")
