"""``POST /v1/retrieve`` on a real runtime: cited, filtered passages of what ``evermind ingest``
stored in the tenant's namespace; "no evidence" as an explicit result; a bad filter a 400
naming the problem (never a 500); another tenant's rows never returned."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evermind.cli import main
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.runtime.helpers import (
    PACKAGE_CAP,
    TOKEN_A,
    TOKEN_A_READ,
    TOKEN_B,
    assert_error,
    bearer,
    write_tokens,
)
from tests.runtime.test_ask_where import QUESTION, line_of, tickets


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A runtime whose database holds alpha's tickets and bravo's (both named tickets.csv,
    both about the question), ingested by ``evermind ingest --tenant`` before it starts."""
    root = tmp_path_factory.mktemp("retrieve")
    config = RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens.txt"),
        max_package_bytes=PACKAGE_CAP,
        rate_limit=0,
        worker_threads=2,
    )
    config.data_dir.mkdir(parents=True)
    for tenant, rows in (("alpha", tickets()), ("bravo", bravo_tickets())):
        folder = root / tenant
        folder.mkdir()
        write_csv(folder / "tickets.csv", rows)
        argv = ["ingest", str(folder / "tickets.csv"), "--base", str(folder)]
        argv += ["--store", str(config.db_path), "--tenant", tenant, "--columns", "subject,body"]
        assert main(argv) == 0
    with ServerThread(config) as running:
        yield running


def bravo_tickets() -> list[dict[str, str]]:
    """Bravo's secret tickets: open, P1, and about the very same question."""
    return [
        {
            "id": f"B-SECRET-{n}",
            "status": "open",
            "priority": "P1",
            "age": str(n),
            "subject": f"Bravo webhook signature mismatch {n}",
            "body": "Bravo's webhook signature mismatch on the payments hook.",
        }
        for n in range(5)
    ]


def client(server: ServerThread, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=bearer(token), timeout=30)


def retrieve(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/retrieve", json={"question": QUESTION, **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def ids(answer: dict[str, Any]) -> list[str]:
    return sorted(p["fields"]["id"] for p in answer["passages"])


def test_filtered_cited_passages_and_no_evidence(server: ServerThread) -> None:
    where = {"and": [{"eq": ["status", "open"]}, {"eq": ["priority", "P1"]}]}
    with client(server, TOKEN_A_READ) as alpha:  # a read-only key may retrieve
        answer = retrieve(alpha, top_k=5, where=where)
        assert answer["object"] == "retrieval" and answer["namespace"] == "default"
        assert (answer["refused"], answer["reason"]) == (False, None)
        assert ids(answer) == ["O-0", "O-1", "O-2"]  # below the unfiltered top 5
        for passage in answer["passages"]:
            assert passage["citation"] == f"tickets.csv:{line_of(passage['fields']['id'])}"
            assert set(passage) >= {"n", "source", "line", "score", "key", "text", "fields"}
        plain = retrieve(alpha, top_k=5)
        assert all(p["fields"]["status"] == "closed" for p in plain["passages"])
        ranged = retrieve(alpha, top_k=50, where={"range": ["age", {"gte": 5, "lt": 20}]})
        assert ids(ranged) == sorted(["O-0", "O-2", *(f"T-{n:03d}" for n in range(5, 20))])
        for body in (
            {"question": "banana smoothie recipe with kale"},
            {"question": QUESTION, "where": {"eq": ["status", "archived"]}},
            {"question": QUESTION, "namespace": "elsewhere"},
        ):
            response = alpha.post("/v1/retrieve", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["passages"] == []
            assert (response.json()["refused"], response.json()["reason"]) == (
                True,
                "no evidence",
            )


def test_another_tenants_rows_are_never_returned(server: ServerThread) -> None:
    with client(server, TOKEN_A) as alpha, client(server, TOKEN_B) as bravo:
        mine = retrieve(bravo, top_k=50)
        assert mine["passages"] and all(i.startswith("B-SECRET") for i in ids(mine))
        theirs = retrieve(alpha, top_k=50)
        assert not any(i.startswith("B-SECRET") for i in ids(theirs))
        # A filter naming only bravo's values, from alpha: nothing (a filter never widens).
        for where in (
            {"eq": ["id", "B-SECRET-1"]},
            {"or": [{"exists": "tenant"}, {"eq": ["id", "B-SECRET-2"]}]},
        ):
            assert retrieve(alpha, where=where)["passages"] == []
        # Naming bravo's namespace path reaches nothing of bravo's.
        spoof = retrieve(alpha, namespace="bravo/default")
        assert spoof["passages"] == [] and spoof["refused"] is True
        assert not any(i.startswith("O-") for i in ids(retrieve(bravo, top_k=50)))


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ({"like": ["status", "open"]}, "unknown operator 'like'"),
        ({"eq": ["status"]}, "bad operand for 'eq'"),
        ({"eq": 5}, "bad operand for 'eq'"),
        ({"eq": ["a b", 1]}, "'a b' is not an identifier"),
        ({"eq": ["status", None]}, "status"),
        ({"eq": ["status", {"x": 1}]}, "status"),
        ({"in": ["priority", 5]}, "'in' needs a list of values"),
        ({"range": ["age", {"gte": 1, "lt": "z"}]}, "all numbers or all strings"),
        ({"range": ["age", {"about": 3}]}, "unknown range bound"),
        ({"range": ["age", {}]}, "give at least one of"),
        ({"range": ["age", 3]}, "bad operand for 'range'"),
        ({"and": 5}, "bad operand for 'and'"),
        ({"not": None}, "'not' needs a filter"),
        ({"eq": ["age", 2**60]}, "beyond"),
        ({}, "expected one {op: operand} object"),
        ({"eq": ["a", 1], "in": ["b", [1]]}, "expected one {op: operand} object"),
        ({"in": ["id", list(range(3000))]}, "more than 1024 parts"),
    ],
)
def test_a_bad_filter_is_a_400_naming_the_problem(
    server: ServerThread, where: dict[str, Any], named: str
) -> None:
    with client(server, TOKEN_A) as alpha:
        response = alpha.post("/v1/retrieve", json={"question": QUESTION, "where": where})
        message = assert_error(response, 400)
        assert named in message and "\n" not in message


def test_malformed_bodies_are_400s_naming_the_field_and_keys_are_required(
    server: ServerThread,
) -> None:
    deep: dict[str, Any] = {"eq": ["a", 1]}
    for _ in range(40):
        deep = {"not": deep}
    with client(server, TOKEN_A) as alpha:
        assert_error(alpha.post("/v1/retrieve", json={"question": QUESTION, "where": deep}), 400)
        for body in (
            {"question": QUESTION, "where": 'status = "open"'},
            {"question": QUESTION, "where": ["eq", "a", 1]},
            {"question": QUESTION, "top_k": 0},
            {"question": ""},
            {},
        ):
            message = assert_error(alpha.post("/v1/retrieve", json=body), 400)
            field = "where" if "where" in body else "top_k" if "top_k" in body else "question"
            assert field in message, (body, message)
    anonymous = httpx.post(f"{server.url}/v1/retrieve", json={"question": QUESTION}, timeout=30)
    assert anonymous.status_code == 401
