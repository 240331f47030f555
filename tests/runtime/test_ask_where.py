"""``evermind ask --where``: a filtered question over a CSV of tickets, on SQLite and Postgres.

The same CSV goes through ``evermind ingest`` into a SQLite file and into a real Postgres
(pgserver, the session's ``postgres`` fixture); on each, a filtered ``evermind ask`` returns
only rows the filter admits, each cited ``tickets.csv:<its line>``, including matches that
rank far below ``top_k`` among all rows (filtering is inside recall, not after its cut).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from evermind.cli import main

QUESTION = "webhook signature mismatch"


def tickets() -> list[dict[str, str]]:
    """40 tickets: 30 closed ones that match the question strongly, a few open ones that
    mention it once (ranked below every closed one), and open ones about something else."""
    rows = []
    for n in range(30):
        rows.append(
            {
                "id": f"T-{n:03d}",
                "status": "closed",
                "priority": "P1",
                "age": str(n),
                "subject": f"Webhook signature mismatch after deploy {n}",
                "body": "Every webhook fails: signature mismatch, signature mismatch again.",
            }
        )
    for n, (priority, age) in enumerate([("P1", "12"), ("P1", "40"), ("P1", "7"), ("P2", "3")]):
        rows.append(
            {
                "id": f"O-{n}",
                "status": "open",
                "priority": priority,
                "age": age,
                "subject": f"Billing export question {n}",
                "body": "Mostly about invoices and exports; a webhook is mentioned once.",
            }
        )
    for n in range(6):
        rows.append(
            {
                "id": f"U-{n}",
                "status": "open",
                "priority": "P1",
                "age": "",  # an empty cell: the field is absent
                "subject": f"Dashboard fonts look blurry {n}",
                "body": "The charts render with blurry fonts on a retina screen.",
            }
        )
    return rows


def line_of(ticket_id: str) -> int:
    """The CSV line a ticket is on (the header is line 1)."""
    ids = [row["id"] for row in tickets()]
    return ids.index(ticket_id) + 2


@pytest.fixture(params=["sqlite", "pgvector"])
def store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> list[str]:
    """The tickets ingested by ``evermind ingest`` into a SQLite file or a fresh Postgres
    namespace: the ``--store`` and ``--namespace`` arguments that reach them."""
    monkeypatch.chdir(tmp_path)
    rows = tickets()
    with open(tmp_path / "tickets.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if request.param == "sqlite":
        where = str(tmp_path / "memory.db")
    else:
        where = str(request.getfixturevalue("postgres"))
    namespace = f"where-{request.node.name}".replace("[", "-").replace("]", "")
    reach = ["--store", where, "--namespace", namespace]
    code = main(["ingest", "tickets.csv", *reach, "--columns", "subject,body"])
    capsys.readouterr()
    assert code == 0
    return reach


def ask(
    capsys: pytest.CaptureFixture[str], store: list[str], *args: str
) -> tuple[int, dict[str, Any], str]:
    code = main(["ask", QUESTION, *store, "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else {}, err


def ids(answer: dict[str, Any]) -> list[str]:
    return [p["fields"]["id"] for p in answer["passages"]]


def test_a_filter_keeps_only_matching_rows_with_their_citations(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, plain, err = ask(capsys, store, "--top-k", "5")
    assert code == 0, err
    assert all(p["fields"]["status"] == "closed" for p in plain["passages"])  # open rank low

    code, answer, err = ask(
        capsys, store, "--top-k", "5", "--where", 'status = "open" and priority = "P1"'
    )
    assert code == 0, err
    assert sorted(ids(answer)) == ["O-0", "O-1", "O-2"]  # found below the unfiltered top 5
    for passage in answer["passages"]:
        assert passage["citation"] == f"tickets.csv:{line_of(passage['fields']['id'])}"
        assert passage["fields"]["status"] == "open" and passage["fields"]["priority"] == "P1"
        assert "webhook" in passage["text"].lower()

    # Numbers are numbers: a range over the typed "age" cells.
    code, answer, _ = ask(
        capsys, store, "--where", 'status = "open" and age >= 5 and age < 20', "--top-k", "10"
    )
    assert code == 0 and sorted(ids(answer)) == ["O-0", "O-2"]
    code, answer, _ = ask(capsys, store, "--where-json", '{"in": ["priority", ["P2"]]}')
    assert code == 0 and ids(answer) == ["O-3"]
    # A number is not the string "12" (type-strict), and the blurry-font rows share no term.
    code, answer, err = ask(capsys, store, "--where", 'age = "12"')
    assert (code, answer["passages"], err) == (1, [], "no evidence\n")
    code, answer, _ = ask(capsys, store, "--where", "not exists age")
    assert (code, answer["passages"]) == (1, [])


def test_a_closed_top_k_of_thirty_matches_is_cut_after_the_filter(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every closed ticket with age < 25 is found, not only those in an unfiltered top 25."""
    code, answer, err = ask(
        capsys, store, "--where", 'status = "closed" and age < 25 and age != 3', "--top-k", "50"
    )
    assert code == 0, err
    assert sorted(ids(answer)) == sorted(f"T-{n:03d}" for n in range(25) if n != 3)


def test_a_bad_filter_is_one_line_and_searches_nothing(
    store: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = str(tmp_path / "nowhere.db")  # not opened: the filter is parsed first
    code = main(["ask", QUESTION, "--store", missing, "--where", 'status = "open" and'])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        "error: where: position 20: expected a condition (field = value, exists field, "
        "not …, or '('), got the end"
    ]
    code = main(["ask", QUESTION, "--store", missing, "--where-json", '{"like": ["a", 1]}'])
    out, err = capsys.readouterr()
    assert code == 2 and "unknown operator 'like'" in err and len(err.strip().splitlines()) == 1
    code = main(["ask", QUESTION, "--where", "a = 1", "--where-json", "{}"])
    assert code == 2 and "not allowed with argument" in capsys.readouterr().err
