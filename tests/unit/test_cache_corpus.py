"""The cache corpus (``evals/cache_corpus``): its files pass the check, its split is fixed.

The real files are validated with the check's own functions (fields, ids, word counts,
miss_type vocabulary, repeated texts) and, when the shared development sets are present,
checked for overlap with them. The split must be a pure function of a record's domain
group and id (pinned values), close to 60/40, and both splits must hold every miss_type.
Small hand-made files show that each check catches what it is for.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from evals import eval_dir
from evals.cache_corpus import (
    MISS_TYPES,
    TUNE_SHARE,
    CorpusError,
    pairs,
    split_of,
    triples,
)
from evals.cache_corpus.check import (
    Report,
    check_overlap,
    check_pair,
    check_triple,
    check_unique,
    dev_texts,
    main,
    run_check,
    validate_files,
)
from evals.cache_corpus.overlap import TrigramIndex, jaccard, trigrams


def _triple(n: int, **changes: Any) -> dict[str, Any]:
    record = {
        "id": f"wa-{n:04d}",
        "query": f"How many days does a refund for order {n} usually take to arrive?",
        "paraphrase": f"What is the typical wait, in days, before order {n}'s refund lands?",
        "near_miss": f"How many days does an exchange for order {n} usually take to arrive?",
        "domain": "ecommerce",
        "miss_type": "operation",
        "source": "written",
    }
    record.update(changes)
    return record


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_the_corpus_files_pass_every_check() -> None:
    report = run_check()
    assert report.errors == [], "\n".join(report.errors[:20])
    count = len(report.triples)  # a count, not the records: the report split is never shown
    assert count >= 700, count


def test_the_corpus_does_not_overlap_the_development_sets() -> None:
    dev = dev_texts(eval_dir())
    if dev is None:
        pytest.skip(f"the development sets are not in {eval_dir()}")
    report = Report()
    validate_files(Path(__file__).resolve().parents[2] / "evals" / "cache_corpus", report)
    check_overlap(report, dev)
    assert report.errors == [], "\n".join(report.errors[:20])


def test_the_split_is_a_pure_function_of_group_and_id() -> None:
    # Pinned: a change of hash, key layout or share moves these and fails here.
    assert split_of("wa-0001", "shell") == split_of("wa-0001", "shell")
    pinned = {
        (i, g): split_of(i, g) for i in ("wa-0001", "wa-0002", "wb-0417") for g in ("git", "law")
    }
    # Whole domains go one way: the id never moves a record (git is a report domain).
    assert pinned == {(i, g): {"git": "report", "law": "tune"}[g] for i, g in pinned}
    shares = Counter(split_of("x", f"domain-{n:05d}") for n in range(20_000))
    assert abs(shares["tune"] / 20_000 - TUNE_SHARE) < 0.015


def test_the_real_split_is_near_60_40_and_holds_every_miss_type() -> None:
    tune, report_split = triples("tune"), triples("report")
    total = len(tune) + len(report_split)
    assert total == len(triples("all"))
    assert 0.53 < len(tune) / total < 0.67
    for part in (tune, report_split):
        assert {t.miss_type for t in part} == set(MISS_TYPES)
    assert {t.id for t in tune}.isdisjoint(t.id for t in report_split)
    again = {t.id: t.split for t in triples("all")}
    assert all(again[t.id] == "tune" for t in tune)


def test_pairs_expand_each_triple_into_a_positive_and_a_negative() -> None:
    every = pairs("all")
    from_triples = [p for p in every if p.source == "written"]
    assert len(from_triples) == 2 * len(triples("all"))
    by_id = {p.id: p for p in from_triples}
    first = triples("tune")[0]  # a tune triple: a failure may print it
    positive, negative = by_id[f"{first.id}/p"], by_id[f"{first.id}/n"]
    assert (positive.a, positive.b, positive.label) == (first.query, first.paraphrase, 1)
    assert (negative.a, negative.b, negative.label) == (first.query, first.near_miss, 0)
    assert positive.split == negative.split == first.split
    assert {p.split for p in pairs("report")} == {"report"}


def test_loading_merges_every_written_file_and_public_pairs(tmp_path: Path) -> None:
    _write(tmp_path / "written_a.jsonl", [_triple(1), _triple(2)])
    _write(tmp_path / "written_b.jsonl", [_triple(3, id="wb-0003")])
    public = {
        "id": "demo-1",
        "a": "A cat sat.",
        "b": "A cat was sitting.",
        "label": 1,
        "source": "demo",
    }
    _write(tmp_path / "public_demo.jsonl", [public])
    assert [t.id for t in triples("all", tmp_path)] == ["wa-0001", "wa-0002", "wb-0003"]
    merged = pairs("all", tmp_path)
    assert len(merged) == 7
    public_pair = merged[-1]
    assert (public_pair.domain, public_pair.miss_type, public_pair.label) == ("demo", None, 1)
    assert public_pair.split == split_of("demo-1", "public:demo")
    with pytest.raises(CorpusError, match="split must be one of"):
        triples("test", tmp_path)


def test_a_broken_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "written_a.jsonl").write_text('{"id": "wa-0001"\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"written_a.jsonl:1: not JSON"):
        triples("all", tmp_path)
    report = run_check(tmp_path, tmp_path / "absent")
    assert any("written_a.jsonl:1: not JSON" in e for e in report.errors)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"miss_type": "spelling"}, "miss_type 'spelling' is not one of"),
        ({"query": "Refund time?"}, "query has 2 words; expected 4–45"),
        ({"near_miss": " ".join(["word"] * 46)}, "near_miss has 46 words"),
        ({"domain": "E-commerce"}, "must be one lowercase word"),
        ({"id": "wb-0001"}, "should look like 'wa-0001'"),
        ({"source": "paws"}, "source 'paws' should be 'written'"),
        ({"paraphrase": 7}, "paraphrase must be a non-empty string"),
        ({"extra": 1}, "unexpected field 'extra'"),
    ],
)
def test_check_triple_names_each_problem(changes: dict[str, Any], expected: str) -> None:
    problems = check_triple(_triple(1, **changes), "written_a.jsonl:1", "wa")
    assert any(expected in p for p in problems), problems
    assert check_triple(_triple(1), "written_a.jsonl:1", "wa") == []


def test_check_triple_wants_three_different_texts() -> None:
    same = _triple(1)
    same["near_miss"] = same["query"].upper()
    assert check_triple(same, "f:1", "wa") == [
        "f:1: query, paraphrase and near_miss must all differ"
    ]
    missing = {k: v for k, v in _triple(1).items() if k != "near_miss"}
    assert check_triple(missing, "f:1", "wa") == ["f:1: missing field(s) near_miss"]


def test_check_pair_wants_a_binary_label_and_two_texts() -> None:
    good = {"id": "p-1", "a": "One text here.", "b": "Another text.", "label": 0, "source": "demo"}
    assert check_pair(good, "f:1") == []
    assert any("label must be 0 or 1" in p for p in check_pair({**good, "label": True}, "f:1"))
    assert any("same text" in p for p in check_pair({**good, "b": "one  TEXT here."}, "f:1"))


def test_duplicate_ids_and_repeated_texts_are_errors(tmp_path: Path) -> None:
    twin = _triple(2, query=_triple(1)["query"])
    _write(tmp_path / "written_a.jsonl", [_triple(1), twin, _triple(1)])
    report = Report()
    validate_files(tmp_path, report)
    check_unique(report)
    assert any("id wa-0001 also at written_a.jsonl:1" in e for e in report.errors)
    assert any("one text appears in records wa-0001, wa-0002" in e for e in report.errors)


def test_overlap_finds_exact_and_near_duplicates_and_spares_new_text(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    stored = "How do I rotate the access keys of a storage bucket every ninety days?"
    _write(
        dev / "cache_pairs_dev.jsonl",
        [{"id": "cd1", "query": stored, "paraphrase": "x y z w", "near_miss": "q r s t"}],
    )
    _write(
        dev / "memory_recall_dev.jsonl",
        [{"type": "fact", "key": "k1", "content": "Ana owns the billing service."}],
    )
    near = "How do I rotate the access keys of a storage bucket every thirty days?"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _write(
        corpus / "written_a.jsonl",
        [_triple(1, query=near), _triple(2, paraphrase="ana OWNS the billing SERVICE")],
    )
    report = run_check(corpus, dev)
    overlaps = [e for e in report.errors if "overlaps" in e]
    assert len(overlaps) == 2, overlaps
    assert "wa-0001 query overlaps cache_pairs_dev.jsonl#cd1" in overlaps[0]
    assert (
        "wa-0002 paraphrase overlaps memory_recall_dev.jsonl#k1 (trigram Jaccard 1.00)"
        in overlaps[1]
    )
    # No text of the corpus is ever printed: messages carry ids only.
    assert all(near not in e and "billing" not in e for e in report.errors)


def test_trigram_index_scores_like_jaccard() -> None:
    a = "Show me the disk usage of every folder in my home directory"
    b = "Show me the disk usage of every file in my home directory"
    index = TrigramIndex([("a", a)])
    expected = jaccard(trigrams(a), trigrams(b))
    assert index.near(b, threshold=0.0) == [("a", pytest.approx(expected))]
    assert index.near(b, threshold=expected + 0.01) == []
    assert index.near("totally unrelated words here", threshold=0.1) == []


def test_main_prints_counts_and_no_report_texts(capsys: pytest.CaptureFixture[str]) -> None:
    status = main([])
    out = capsys.readouterr().out
    assert status == 0
    assert "miss_type" in out and "triples" in out
    assert not any(t.query in out or t.near_miss in out for t in triples("report"))
