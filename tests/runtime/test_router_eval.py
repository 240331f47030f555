"""The router eval on the labelled set: the SSM's confidence signal adds accuracy.

Runs ``evals/router.py``'s own functions: the small default-corpus model it trains (numpy CPU,
~20 s), then the router with its default (measured) thresholds on the odd rows of
``evals/router_set.jsonl`` — the rows ``--fit`` did not fit on — with and without the
confidence signal. Measured (``python -m evals.router --fit``): 0.865 with, 0.798 without.
"""

from __future__ import annotations

from evals import router as router_eval


def test_the_confidence_signal_adds_accuracy() -> None:
    model = router_eval.train_default_model()
    rows = router_eval.load_set()[1::2]
    report = router_eval.evaluate(model, rows, do_fit=False)["all_rows"]
    with_signal = report["with_confidence"]
    without = report["without_confidence"]
    assert with_signal["n"] == len(rows) >= 80
    assert with_signal["accuracy"] >= 0.8
    assert with_signal["accuracy"] >= without["accuracy"] + 0.04
    # The signal is what moves out-of-domain asks to the frontier.
    assert with_signal["reasons"].get("confidence", 0) > 0
    assert without["reasons"].get("confidence", 0) == 0
