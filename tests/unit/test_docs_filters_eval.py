"""``evals/docs_filters`` runs end to end: every returned row passes its filter, and the
filtered questions find their rows (a regression guard on the set and the path, not a tuning
target: nothing is fitted to it)."""

from __future__ import annotations

import asyncio

from evals.docs_filters import run


def test_the_filtered_questions_find_their_rows_and_nothing_else() -> None:
    report = asyncio.run(run("none"))
    assert (report["questions"], report["rows"]) == (31, 200)
    assert report["violations"] == 0
    assert report["recall@5"] >= 0.9, [q for q in report["per_question"] if q["recall@5"] < 1]
    assert report["unfiltered recall@5"] < report["recall@5"]  # the filters do the work
