"""Recall through the MCP tool with a trained model beats lexical-only recall@1 (dev set).

The whole user workflow, with real processes: train a nano language model on the default
corpus (numpy), store the 155 facts of the memory development set through ``evermind mcp``
(``memory_remember``), tune the model's embedder on that memory file
(``evermind tune-embedder``), then ask the 205 questions through ``memory_recall`` on a server
started with ``--model`` and compare with the lexical-only server. ``evals/mcp_recall.py``
does the storing, asking and scoring; this test runs it and checks its numbers. They are
development numbers (the set is for tuning; the held-out set is not in the repository).

Takes about three and a half minutes on two quiet CPU cores, most of it the 300 tuning steps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from evals import find

from tests import procs

ROOT = Path(__file__).resolve().parents[2]
EVAL_SCRIPT = ROOT / "evals" / "mcp_recall.py"
#: Where the script finds the development set ($EVERMIND_EVAL_DIR, else ../shared/eval).
DEV_SET: Path = find("memory_recall_dev.jsonl")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not DEV_SET.is_file(),
        reason=f"the memory development set is not at {DEV_SET}; set EVERMIND_EVAL_DIR",
    ),
]


def test_tuned_model_beats_lexical_recall_at_1(tmp_path: Path) -> None:
    base = tmp_path / "base.evermind"
    trained = procs.run(
        [sys.executable, "-m", "evermind.cli", "train", "--device", "cpu", "--steps", "200",
         "--out", str(base)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    results = tmp_path / "recall.json"
    evaluated = procs.run(
        [sys.executable, str(EVAL_SCRIPT), "--set", str(DEV_SET),
         "--tune-from", str(base), "--json", str(results)],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    print(evaluated.stdout)
    runs = json.loads(results.read_text(encoding="utf-8"))
    lexical, model = runs["lexical"], runs["model"]
    assert lexical["ranked_by"].startswith("ranked by: lexical only: no embedder")
    assert model["ranked_by"].startswith("ranked by: semantic+lexical; convex")
    assert lexical["all"]["n"] == model["all"]["n"] == 205
    print(
        f"recall@1: lexical {lexical['all']['recall@1']:.3f}, "
        f"tuned model {model['all']['recall@1']:.3f}"
    )
    assert model["all"]["recall@1"] > lexical["all"]["recall@1"]
