"""Recall through the MCP tool with a trained model beats lexical-only recall@1 (dev set).

The whole user workflow, with real processes: train a nano language model on the default
corpus (numpy), store the 155 facts of the memory development set through ``evermind mcp``
(``memory_remember``), tune the model's embedder on that memory file
(``evermind tune-embedder --steps 150 --seed 0``), then ask the 205 questions through
``memory_recall`` on a server started with ``--model`` and compare with the lexical-only
server. ``evals/mcp_recall.py`` does the storing and asking; this test runs it and grades both runs'
answers through the evaluation harness (``evals.mcp_recall.report``: a case per question,
``RecallAtK(1, capped=True)``), then gates the model's report with ``check_gates``: its
recall@1 must reach the lexical run's plus one question out of 205 (the bar "beats lexical
recall@1", as a minimum). A failure prints both reports, so CI shows which questions each
ranker missed. They are development numbers (the set is for tuning; the held-out set is not
in the repository).

Takes about 90 s on two quiet CPU cores since training and tuning run the scan's fast path
(measured 2026-12-02 on the shared 2-core box: 89 s with 91% of a core, train 34 s, tuning 46
s; 111-169 s under heavier load; 128 s before it with 90% of a core, train 49 s, tuning 71 s;
CPU seconds 119-123 before, 83-98 after). The tuning runs 150 steps, not the command's default
300: from the same base the margin over lexical recall@1 was the same (+0.015) and seeds 0, 1,
2 gave +0.015, +0.015, +0.010. The 200 training steps stay: from a base trained 50 steps the
tuned model lost to lexical recall with two of three seeds (100 steps: +0.015, +0.005, +0.005).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from evals import find, mcp_recall

from evermind.evaluation import GraderMinimum, check_gates
from tests import procs

ROOT = Path(__file__).resolve().parents[2]
EVAL_SCRIPT = ROOT / "evals" / "mcp_recall.py"
#: Where the script finds the development set ($EVERMIND_EVAL_DIR, else ../shared/eval).
DEV_SET: Path = find("memory_recall_dev.jsonl")

#: Steps of ``evermind train``: the tuning gain depends on them (see the module docstring).
TRAIN_STEPS = 200
#: Steps of ``evermind tune-embedder`` (``--tune-steps``): 150 gave the margin 300 gave.
TUNE_STEPS = 150

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not DEV_SET.is_file(),
        reason=f"the memory development set is not at {DEV_SET}; set EVERMIND_EVAL_DIR",
    ),
]


def test_tuned_model_beats_lexical_recall_at_1(tmp_path: Path) -> None:
    base = tmp_path / "base.evermind"
    start = time.perf_counter()
    trained = procs.run(
        [sys.executable, "-m", "evermind.cli", "train", "--device", "cpu",
         "--steps", str(TRAIN_STEPS), "--out", str(base)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    train_s = time.perf_counter() - start
    results = tmp_path / "recall.json"
    evaluated = procs.run(
        [sys.executable, str(EVAL_SCRIPT), "--set", str(DEV_SET), "--tune-from", str(base),
         "--tune-steps", str(TUNE_STEPS), "--seed", "0", "--json", str(results)],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    print(evaluated.stdout)
    runs = json.loads(results.read_text(encoding="utf-8"))
    lexical, model = runs["lexical"], runs["model"]
    print(
        f"seconds: train {train_s:.0f}, tune {runs['tune_seconds']:.0f}, "
        f"MCP lexical {sum(lexical['seconds'].values()):.0f}, "
        f"MCP model {sum(model['seconds'].values()):.0f}"
    )
    assert lexical["ranked_by"].startswith("ranked by: lexical only: no embedder")
    assert model["ranked_by"].startswith("ranked by: semantic+lexical; convex")
    assert lexical["all"]["n"] == model["all"]["n"] == 205
    baseline = asyncio.run(mcp_recall.report("lexical only", DEV_SET, lexical["answers"]))
    tuned = asyncio.run(mcp_recall.report("tuned model", DEV_SET, model["answers"]))
    floor = baseline.grader("recall@1")
    assert floor.graded == len(tuned.results) == 205
    # The harness's rates are the script's (one definition of recall@1, eval_dev.py's).
    assert floor.value == pytest.approx(lexical["all"]["recall@1"])
    assert tuned.grader("recall@1").value == pytest.approx(model["all"]["recall@1"])
    print(f"recall@1: lexical {floor.value:.3f}, tuned model {tuned.grader('recall@1').value:.3f}")
    # "Beats lexical recall@1": at least one more question right at rank 1 (of 205).
    gates = check_gates(tuned, [GraderMinimum("recall@1", (floor.passed + 1) / floor.graded)])
    if not gates.passed:
        print(baseline.render(), tuned.render(), sep="\n")
    assert gates.passed, gates.render()
