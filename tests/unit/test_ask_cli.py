"""``evermind ask``: cited passages from what ``evermind ingest`` stored, or "no evidence"."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from evermind.cli import main
from evermind.memory import MemoryStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"
QUESTION = "How many workers may hold a lease at once?"


@pytest.fixture
def store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The ingest fixtures, ingested by ``evermind ingest`` into a fresh store."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES, tmp_path / "kb")
    db = tmp_path / "memory.db"
    code = main(["ingest", "kb", "--store", str(db), "--columns", "subject,body"])
    capsys.readouterr()
    assert code == 0
    return db


def ask(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["ask", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_cites_the_right_source_first(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(capsys, QUESTION, "--store", str(store), "--top-k", "3")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("[1] kb/docs/configuration.md:"), out
    assert "(Configuration > Server)" in first and "workers_max" in out


def test_ask_json_shape(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(
        capsys, QUESTION, "--store", f"sqlite:///{store}", "--json", "--top-k", "2"
    )
    assert code == 0, err
    answer = json.loads(out)
    assert answer["question"] == QUESTION and answer["refused"] is False
    assert 1 <= len(answer["passages"]) <= 2
    first = answer["passages"][0]
    assert set(first) == {
        "n",
        "source",
        "line",
        "breadcrumb",
        "citation",
        "score",
        "key",
        "text",
        "fields",
    }
    assert first["n"] == 1 and first["source"] == "kb/docs/configuration.md"
    assert first["line"] > 0 and first["breadcrumb"] == "Configuration > Server"
    assert first["citation"] == f"kb/docs/configuration.md:{first['line']} (Configuration > Server)"
    assert first["key"].startswith("kb/docs/configuration.md#") and "workers_max" in first["text"]


def test_ask_refuses_an_unrelated_question(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = ask(capsys, "banana smoothie recipe with kale", "--store", str(store))
    assert (code, out, err) == (1, "no evidence\n", "")
    code, out, err = ask(capsys, "banana smoothie recipe", "--store", str(store), "--json")
    assert code == 1 and json.loads(out) == {
        "question": "banana smoothie recipe",
        "refused": True,
        "passages": [],
    }
    assert err == "no evidence\n"


def test_ask_reads_only_ingested_chunks_of_its_namespace(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A memory that is not an ingested chunk is never a passage; another namespace is empty."""

    async def remember() -> None:
        async with MemoryStore(store, namespace="default/default") as memory:
            await memory.remember("smoothie", "The banana smoothie recipe uses kale.")

    asyncio.run(remember())
    code, out, _ = ask(capsys, "banana smoothie recipe with kale", "--store", str(store))
    assert (code, out) == (1, "no evidence\n")
    code, out, _ = ask(capsys, QUESTION, "--store", str(store), "--tenant", "acme")
    assert (code, out) == (1, "no evidence\n")


def test_ask_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = ask(capsys, "anything", "--store", str(tmp_path / "missing.db"))
    assert code == 2 and "no memory store at" in err and "evermind ingest" in err
    code, _, err = ask(capsys, "anything", "--top-k", "0")
    assert code == 2 and "argument --top-k: expected 1 to 50, got 0" in err


def test_ask_embeds_the_question_as_the_chunks_were(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingested and asked with ``--embedder terms``: the same source first, the same refusal."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES, tmp_path / "kb")
    db = str(tmp_path / "terms.db")
    assert main(["ingest", "kb", "--store", db, "--embedder", "terms"]) == 0
    capsys.readouterr()
    code, out, err = ask(capsys, QUESTION, "--store", db, "--embedder", "terms", "--top-k", "1")
    assert code == 0, err
    assert out.startswith("[1] kb/docs/configuration.md:"), out
    code, out, _ = ask(
        capsys, "banana smoothie recipe with kale", "--store", db, "--embedder", "terms"
    )
    assert (code, out) == (1, "no evidence\n")
