"""The conversational-memory set (``evals/conversation_memory``): its files pass the check,
its split is fixed, the check catches what it is for, and the evaluation's metrics mean what
its docstring says (hand-made hits), end to end on a tiny hand-made dialogue and on one real
tune dialogue (lexical only, fast).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from evals.conversation_memory import (
    KINDS,
    ConversationSetError,
    Question,
    load,
    split_of,
)
from evals.conversation_memory.check import (
    check_question,
    check_shape,
    overlap_stats,
    run_check,
)
from evals.conversation_memory.check import (
    main as check_main,
)
from evals.conversation_memory.evaluate import aggregate, main, question_metrics, turn_time

from evermind.memory import Hit


def test_the_set_passes_its_check_and_has_its_promised_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = run_check()
    assert report.errors == []
    assert check_shape(report) == []
    assert len(report.turns) >= 1000 and len(report.questions) >= 250
    assert check_main([]) == 0
    printed = capsys.readouterr().out
    assert "| all | - | - | 1114 | 268 |" in printed
    for question in report.questions:  # counts and ids only: no question is printed
        assert question["question"] not in printed
    # The paraphrased kind shares fewer words with its gold turns than the direct kinds.
    stats = overlap_stats(report)
    assert stats["paraphrased"]["covered"] < stats["single-session"]["covered"] / 2


def test_the_split_is_fixed_by_dialogue_and_holds_every_kind() -> None:
    pinned = {
        "devproj": "report",
        "trip": "tune",
        "bakery": "report",
        "student": "tune",
        "household": "tune",
        "research": "report",
        "marathon": "report",
    }
    assert {d: split_of(d) for d in pinned} == pinned
    tune, report = load("tune"), load("report")
    assert {d.id for d in tune} | {d.id for d in report} == set(pinned)
    assert not {d.id for d in tune} & {d.id for d in report}
    for dialogues in (tune, report):
        kinds = Counter(q.kind for d in dialogues for q in d.questions)
        assert set(kinds) == set(KINDS)
    with pytest.raises(ConversationSetError, match="split must be one of"):
        load("test")


def _turn(dialogue: str, session: int, n: int, date: str, text: str) -> dict[str, Any]:
    return {
        "id": f"{dialogue}-s{session}-{n:03d}",
        "dialogue": dialogue,
        "session": session,
        "date": date,
        "speaker": "user" if n % 2 else "assistant",
        "text": text,
    }


def _question(qid: str, kind: str, gold: list[str], stale: list[str]) -> dict[str, Any]:
    return {
        "id": qid,
        "dialogue": "tiny",
        "kind": kind,
        "question": "What is it?",
        "gold_turns": gold,
        "distractor_turns": stale,
        "answer": "it",
    }


def _write(folder: Path, turns: list[dict[str, Any]], questions: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dialogues = sorted({t["dialogue"] for t in turns})
    lines = {
        "dialogues.jsonl": [{"id": d, "title": f"the {d} dialogue"} for d in dialogues],
        "turns.jsonl": turns,
        "questions.jsonl": questions,
    }
    for name, records in lines.items():
        text = "".join(json.dumps(r) + "\n" for r in records)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_the_check_catches_each_kind_of_mistake(tmp_path: Path) -> None:
    turns = [
        _turn("tiny", 1, 1, "2026-01-01", "The port is 8080."),
        _turn("tiny", 1, 2, "2026-01-01", "Noted, 8080."),
        _turn("tiny", 2, 3, "2026-01-08", "The port is 8300 now."),
    ]
    by_id = {t["id"]: t for t in turns}
    order = {t["id"]: i for i, t in enumerate(turns)}
    ok = _question("tiny-q01", "knowledge-update", ["tiny-s2-003"], ["tiny-s1-001"])
    assert check_question(ok, "q:1", by_id, order) == []
    cases = {
        "not a turn": _question("tiny-q02", "single-session", ["tiny-s9-009"], []),
        "has no gold turns": _question("tiny-q03", "abstention", ["tiny-s1-001"], []),
        "needs at least one gold": _question("tiny-q04", "temporal", [], []),
        "span one session": _question("tiny-q05", "multi-session", ["tiny-s1-001"], []),
        "comes after the latest gold": _question(
            "tiny-q06", "knowledge-update", ["tiny-s1-001"], ["tiny-s2-003"]
        ),
        "lists its stale turn": _question("tiny-q07", "knowledge-update", ["tiny-s2-003"], []),
        "both gold and distractor": _question(
            "tiny-q08", "single-session", ["tiny-s1-001"], ["tiny-s1-001"]
        ),
        "is not one of": _question("tiny-q09", "trivia", ["tiny-s1-001"], []),
        "should look like": _question("q10", "single-session", ["tiny-s1-001"], []),
    }
    for expected, record in cases.items():
        problems = check_question(record, "q:1", by_id, order)
        assert any(expected in p for p in problems), (expected, problems)
    # File-level mistakes: a turn id out of sequence, a session dated before the last one,
    # a repeated question id, and a set far smaller than promised.
    bad_turns = [*turns, _turn("tiny", 3, 9, "2026-01-02", "Out of order.")]
    folder = _write(tmp_path / "bad", bad_turns, [ok, ok])
    report = run_check(folder)
    assert any("expected 'tiny-s3-004'" in e for e in report.errors)
    assert any("not dated after session 2" in e for e in report.errors)
    assert any("question id 'tiny-q01' repeated" in e for e in report.errors)
    good = run_check(_write(tmp_path / "good", turns, [ok]))
    assert good.errors == []
    assert any("dialogues; expected 6+" in p for p in check_shape(good))
    assert check_main(["--folder", str(tmp_path / "bad")]) == 1


def _hit(key: str, score: float) -> Hit:
    return Hit(key=key, content=key, tags=(), score=score, ranked_by="test")


def _q(kind: str, gold: tuple[str, ...], stale: tuple[str, ...] = ()) -> Question:
    return Question("d-q01", "d", kind, "?", gold, stale, "!")


def test_metric_definitions_on_hand_made_rankings() -> None:
    ranking = [_hit(f"t{i}", 1.0 - i / 20) for i in range(10)]  # t0 best … t9, no ties
    # Two gold turns, at ranks 3 and 8 (1-based): one of two in the top 5.
    two = question_metrics(ranking, _q("multi-session", ("t2", "t7")))
    assert two == {"empty": 0.0, "r@5": 0.5, "r@10": 1.0, "mrr": pytest.approx(1 / 3)}
    # Six gold turns: recall@5 is capped by k (5 of them in the top 5 is full recall).
    six = question_metrics(ranking, _q("multi-session", tuple(f"t{i}" for i in range(6))))
    assert six["r@5"] == 1.0 and six["r@10"] == 1.0 and six["mrr"] == 1.0
    # A gold turn recall did not return counts in no cut-off and gives MRR 0.
    missing = question_metrics(ranking, _q("single-session", ("t99",)))
    assert missing == {"empty": 0.0, "r@5": 0.0, "r@10": 0.0, "mrr": 0.0}
    # Ties break against gold: t4 tied with t5 and t6 counts at rank 7, outside the top 5.
    tied = [*ranking[:4], _hit("t4", 0.5), _hit("t5", 0.5), _hit("t6", 0.5), *ranking[7:]]
    assert question_metrics(tied, _q("single-session", ("t4",)))["r@5"] == 0.0
    # stale@1: the old value ranked first, for knowledge-update questions only.
    update = question_metrics(ranking, _q("knowledge-update", ("t1",), ("t0",)))
    assert update["stale@1"] == 1.0 and update["mrr"] == 0.5
    assert question_metrics(ranking, _q("knowledge-update", ("t0",), ("t1",)))["stale@1"] == 0.0
    assert "stale@1" not in question_metrics(ranking, _q("temporal", ("t1",), ("t0",)))
    # Nothing returned: empty; an abstention question has no recall, only empty.
    assert question_metrics([], _q("abstention", ())) == {"empty": 1.0}
    table = aggregate(
        [
            (_q("abstention", ()), {"empty": 1.0}),
            (_q("abstention", ()), {"empty": 0.0}),
            (_q("multi-session", ("t2", "t7")), two),
        ]
    )
    assert table["abstention"] == {"abstain": 0.5, "n": 2.0}
    assert table["all"]["n"] == 3.0 and table["all"]["r@5"] == 0.5
    assert table["all"]["empty"] == 0.0  # answerable questions only


def test_the_eval_ranks_a_tiny_dialogue_lexically(tmp_path: Path) -> None:
    lines = [
        "We adopted a grey cat called Pepper from the shelter.",
        "Pepper sounds lovely.",
        "My sister Ines lives in Porto and teaches chemistry.",
        "Teaching chemistry is hard work.",
        "The boiler broke, the plumber comes on Friday.",
        "Good luck with the boiler.",
        "The plumber moved the visit to Monday morning instead.",
        "Monday morning, noted.",
    ] + [f"Filler remark number {n} about the weather and the garden." for n in range(12)]
    turns = [
        _turn("tiny", 1 + i // 10, i + 1, "2026-01-01" if i < 10 else "2026-01-09", text)
        for i, text in enumerate(lines)
    ]
    questions = [
        {
            **_question("tiny-q01", "single-session", ["tiny-s1-001"], []),
            "question": "Which cat from the shelter?",
        },
        {
            **_question("tiny-q02", "knowledge-update", ["tiny-s1-007"], ["tiny-s1-005"]),
            "question": "When does the plumber come?",
        },
        {**_question("tiny-q03", "abstention", [], []), "question": "Quantum xylophone?"},
    ]
    folder = _write(tmp_path / "set", turns, questions)
    out = tmp_path / "out.json"
    assert main(["--folder", str(folder), "--set", "all", "--json", str(out)]) == 0
    table = json.loads(out.read_text())["lexical"]
    assert table["single-session"]["r@5"] == 1.0 and table["single-session"]["mrr"] == 1.0
    # "comes" is in the old turn only: BM25 ranks the stale Friday first, the Monday second.
    assert table["knowledge-update"]["r@5"] == 1.0 and table["knowledge-update"]["mrr"] == 0.5
    assert table["knowledge-update"]["stale@1"] == 1.0
    assert table["abstention"]["abstain"] == 1.0  # no shared term: recall returns nothing
    assert main(["--folder", str(folder), "--set", "all", "--dialogue", "nope"]) == 2
    assert turn_time("2026-01-09", 3) - turn_time("2026-01-01", 0) == 8 * 86400 + 3


def test_the_eval_runs_on_one_real_tune_dialogue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "household.json"
    assert main(["--set", "tune", "--dialogue", "household", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| lexical | all | 37 |" in printed
    table = json.loads(out.read_text())["lexical"]
    household = next(d for d in load("tune") if d.id == "household")
    kinds = Counter(q.kind for q in household.questions)
    for kind, n in kinds.items():
        assert table[kind]["n"] == n
        for name in ("r@5", "r@10", "mrr"):
            if kind != "abstention":
                assert 0.0 <= table[kind][name] <= 1.0
        if kind != "abstention":
            assert table[kind]["r@10"] >= table[kind]["r@5"]
    # BM25 finds the stated facts: well above nothing, below perfect on paraphrases.
    assert table["single-session"]["r@10"] >= 0.5
    assert table["paraphrased"]["r@10"] < 1.0
