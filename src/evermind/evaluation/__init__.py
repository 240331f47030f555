"""The evaluation harness as a library: cases, graders, a run, a report, gates.

Public API::

    from evermind.evaluation import (Case, Outcome, Exact, RecallAtK, CitationValidity,
                                     MinPassRate, GraderMinimum, MaxMeanCost, MaxP95Latency,
                                     run_eval, check_gates)
    report = await run_eval("retrieval", cases, system, [RecallAtK(5), CitationValidity()])
    print(report.render())
    verdict = check_gates(report, [MinPassRate(0.9), GraderMinimum("recall@5", 0.8)])
    assert verdict.passed, verdict.render()

Modules: :mod:`~evermind.evaluation.cases` (``Case``, ``Outcome``, ``Grade``, JSONL sets),
:mod:`~evermind.evaluation.graders` (exact, contains, regex, recall@k, citation validity),
:mod:`~evermind.evaluation.judge` (an LLM judge through any bridge),
:mod:`~evermind.evaluation.harness` (``run_eval``), :mod:`~evermind.evaluation.report`,
:mod:`~evermind.evaluation.gates` (pass rates, cost, latency; vacuous gates fail),
:mod:`~evermind.evaluation.gatefile` (graders and gates from a TOML file).
docs/evaluation.md is the guide.
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from evermind.evaluation.cases import Case, Grade, Outcome, Status, load_cases
from evermind.evaluation.gatefile import GateFile, load_gate_file, parse_gate_file
from evermind.evaluation.gates import (
    Gate,
    GateResult,
    GraderMinimum,
    MaxMeanCost,
    MaxMeanLatency,
    MaxP95Latency,
    MinPassRate,
    Verdict,
    check_gates,
)
from evermind.evaluation.graders import CitationValidity, Contains, Exact, Grader, RecallAtK, Regex
from evermind.evaluation.harness import System, run_eval
from evermind.evaluation.judge import LLMJudge, parse_verdict
from evermind.evaluation.report import CaseResult, Rate, Report

__all__ = [
    "Case",
    "CaseResult",
    "CitationValidity",
    "Contains",
    "Exact",
    "Gate",
    "GateFile",
    "GateResult",
    "Grade",
    "Grader",
    "GraderMinimum",
    "LLMJudge",
    "MaxMeanCost",
    "MaxMeanLatency",
    "MaxP95Latency",
    "MinPassRate",
    "Outcome",
    "Rate",
    "RecallAtK",
    "Regex",
    "Report",
    "Status",
    "System",
    "Verdict",
    "check_gates",
    "load_cases",
    "load_gate_file",
    "parse_gate_file",
    "parse_verdict",
    "run_eval",
]
