"""The serving benchmark runs end to end (tiny model, short cells; numbers not checked)."""

from __future__ import annotations

from typing import Any

from benchmarks.serve import format_table, run_serve_bench

from tests.factories import tiny_package


def test_bench_runs_and_reports_every_cell() -> None:
    result = run_serve_bench(
        tiny_package("benchy", "1.0.0"), seconds=0.3, concurrency=(1, 2), reference=False
    )
    assert [(r["kind"], r["clients"]) for r in result["rows"]] == [
        ("embeddings", 1),
        ("embeddings", 2),
        ("completions", 1),
        ("completions", 2),
    ]
    assert all(r["requests"] > 0 and r["errors"] == 0 for r in result["rows"])
    assert result["generation"]["evermind_numpy_tokens_per_s"] > 0
    assert set(result["generation"]["scheduler_tokens_per_s"]) == {"1", "2"}
    assert set(result["ratios"]) == {
        "completion_tok_s_2_over_1", "embedding_req_s_2_over_1"
    }  # fmt: skip
    table = format_table(result)
    assert "| completions | 2 |" in table and "evermind/benchy:1.0.0" in table
    _assert_counts_texts_a_job(result, "raw")  # the default load generator


def _assert_counts_texts_a_job(result: dict[str, Any], client: str) -> None:
    rows = result["rows"]
    assert result["client"] == client and all(r["errors"] == 0 for r in rows)
    embeddings = [r for r in rows if r["kind"] == "embeddings"]
    assert embeddings and all(r["texts_per_job"] >= 1 for r in embeddings)
    assert f"{client} client" in format_table(result)


def test_bench_counts_texts_a_job_with_the_httpx_client_too() -> None:
    """The raw client's run is the test above's; here the httpx load generator's."""
    package = tiny_package("benchy", "1.0.0")
    result = run_serve_bench(
        package, seconds=0.3, concurrency=(2,), reference=False, client="httpx"
    )
    _assert_counts_texts_a_job(result, "httpx")


def test_the_vector_store_scale_bench_runs_on_the_embedded_engines() -> None:
    """A tiny run of benchmarks/vectorstore_scale.py (Postgres is proven by the engine tests)."""
    import asyncio

    from benchmarks.vectorstore_scale import build_parser, format_table, run

    args = build_parser().parse_args(
        ["--n", "1500", "--queries", "20", "--batch", "500", "--engines", "memory,sqlite"]
    )
    doc = asyncio.run(run(args))
    assert [r["engine"] for r in doc["rows"]] == ["memory", "sqlite"]
    for row in doc["rows"]:
        assert row["loaded"] == 1500 and row["ingest_items_per_s"] > 0
        assert row["recall_at_k"] == 1.0  # both scan exactly
        assert 0 < row["query_p50_ms"] <= row["query_p99_ms"]
    assert doc["rows"][1]["open_s"] > 0  # the SQLite store was reopened and loaded
    assert "| sqlite | 1500 |" in format_table(doc)


def test_the_memory_scale_bench_measures_our_store_in_process() -> None:
    """A tiny in-process run of one engine of benchmarks/memory_scale.py: our SQLite store
    (1500 memories: below the ANN threshold, so the scan is exact and recall@10 is 1)."""
    from benchmarks.memory_scale import build_parser, child, format_table

    args = build_parser().parse_args(["--n", "1500", "--queries", "20", "--batch", "500"])
    args.engine = "sqlite"
    row = child(args)
    assert row["loaded"] == 1500 and row["load_per_s"] > 0 and row["recall_at_k"] == 1.0
    assert row["index_scan"] == "numpy" and row["graph"] is False
    assert 0 < row["recall_p50_ms"] <= row["recall_p99_ms"]
    doc = {"n": 1500, "dim": 64, "queries": 20, "k": 10, "batch": 500, "rows": [row]}
    assert "| sqlite | 1500 |" in format_table(doc)


def test_the_ann_choice_bench_runs_numpy_and_usearch() -> None:
    """A tiny run of benchmarks/ann_choice.py on the two libraries the package installs."""
    from benchmarks.ann_choice import build_parser, format_table, run

    argv = ["--n", "2000", "--dim", "16", "--queries", "20", "--libraries", "numpy,usearch"]
    doc = run(build_parser().parse_args(argv))
    assert [r["library"] for r in doc["rows"]] == ["numpy", "usearch"]
    assert doc["rows"][0]["recall_at_k"] == 1.0 and doc["rows"][1]["recall_at_k"] >= 0.95
    assert "| usearch |" in format_table(doc)


def test_the_interleaved_serve_ab_runs_both_sides_every_round() -> None:
    """``benchmarks.serve_ab`` with this checkout on both sides (structure only)."""
    from benchmarks.serve_ab import ROOT, SIDES, format_table, run_ab

    result = run_ab(
        ROOT, tiny_package("benchy", "1.0.0"), rounds=2, seconds=0.3, concurrency=(1, 2)
    )
    assert [entry["first"] for entry in result["rounds"]] == ["before", "after"]
    for entry in result["rounds"]:
        for side in SIDES:
            rows = entry[side]["rows"]
            assert [(r["kind"], r["clients"]) for r in rows] == [
                ("embeddings", 1), ("embeddings", 2), ("completions", 1), ("completions", 2)
            ]  # fmt: skip
            assert all(r["requests"] > 0 and r["errors"] == 0 for r in rows)
            assert "completion_tok_s_2_over_1" in entry[side]["ratios"]
    table = format_table(result)
    assert "| 2 | after |" in table and "median of 2 rounds" in table
