"""What a headless run (``evermind train --headless``) prints: the Studio page's events become
the job's events (:func:`evermind.studio.headless.page_event`) and :class:`JobPrinter` shows
them as a native run's lines. The browser end to end is tests/browser/test_studio_e2e.py."""

from __future__ import annotations

import pytest

from evermind.cli.progress import JobPrinter
from evermind.job import Progress, TokenizerProgress
from evermind.studio.headless import page_event


def test_the_tabs_last_tokenizer_event_finishes_the_bar() -> None:
    assert page_event({"event": "tokenizer-progress", "done": 1, "total": 43}) == (
        TokenizerProgress(1, 43, finished=False)
    )
    assert page_event({"event": "tokenizer-progress", "done": 34, "total": 34}) == (
        TokenizerProgress(34, 34, finished=True)
    )


def test_a_total_that_shrinks_still_prints_a_finished_tokenizer_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """BPE stops early when the corpus runs out of pairs: the tab's total goes 43 -> 34."""
    printer = JobPrinter()
    for event in (
        {"event": "tokenizer-progress", "done": 1, "total": 43},
        {"event": "tokenizer-progress", "done": 34, "total": 34},
    ):
        found = page_event(event)
        assert found is not None
        printer(found)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tokenizer [" + "#" * 24 + "] 34/34"), lines


def test_train_progress_carries_the_routing_to_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    routing = {"aux_loss": 1.003, "layers": {"0": {"fractions": [0.34, 0.66]}}}
    event = page_event(
        {"event": "train-progress", "step": 2, "steps": 2, "loss": 4.9, "lr": 0.003,
         "tokens": 64, "tokens_per_second": 40.0, "elapsed_s": 1.6, "eval_loss": 4.3,
         "routing": routing}
    )  # fmt: skip
    assert isinstance(event, Progress) and event.routing == routing
    JobPrinter()(event)
    line = capsys.readouterr().err.strip()
    assert line.startswith("train [") and " 2/2 loss 4.900 eval 4.300 aux 1.003 L0 34/66%" in line
