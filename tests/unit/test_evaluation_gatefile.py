"""Gate files: what a valid one builds, and one clear error for each kind of bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from evermind.errors import InputError
from evermind.evaluation import (
    Contains,
    Exact,
    GraderMinimum,
    MaxMeanCost,
    MaxMeanLatency,
    MaxP95Latency,
    MinPassRate,
    Regex,
    load_gate_file,
    parse_gate_file,
)

FULL = """
[graders]
exact = true
contains = true
regex = "^\\\\d+$"

[gates]
min_pass_rate = 0.9
max_mean_cost_usd = 0.002
max_p95_latency_ms = 1500
max_mean_latency_ms = 800
grader_minimum = {exact = 0.8, regex = 1}
"""


def test_a_full_gate_file_builds_every_grader_and_gate(tmp_path: Path) -> None:
    path = tmp_path / "gates.toml"
    path.write_text(FULL)
    loaded = load_gate_file(path)
    assert [type(g) for g in loaded.graders] == [Exact, Contains, Regex]
    assert [g.name for g in loaded.graders] == ["exact:answer", "contains:answer", "regex:answer"]
    assert [type(g) for g in loaded.gates] == [
        MinPassRate,
        MaxMeanCost,
        MaxP95Latency,
        MaxMeanLatency,
        GraderMinimum,
        GraderMinimum,
    ]
    assert [g.name for g in loaded.gates] == [
        "pass rate ≥ 0.9",
        "mean cost ≤ $0.002",
        "p95 latency ≤ 1500 ms",
        "mean latency ≤ 800 ms",
        "exact:answer ≥ 0.8",
        "regex:answer ≥ 1",
    ]


def test_false_disables_a_grader_and_true_regex_reads_each_cases_pattern() -> None:
    loaded = parse_gate_file("[graders]\nexact = false\nregex = true\n")
    assert [g.name for g in loaded.graders] == ["regex:answer"]
    assert loaded.gates == ()  # loads; check_gates on no gates is vacuous (not passed)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[gates\n", "gates.toml: not TOML"),
        ("[gate]\nmin_pass_rate = 0.9\n", "gates.toml: unknown key 'gate'"),
        ("title = 'x'\n", "gates.toml: unknown key 'title'"),
        ("[gates]\nmin_pas_rate = 0.9\n", "[gates]: unknown key 'min_pas_rate'"),
        ("[graders]\nexactly = true\n", "[graders]: unknown key 'exactly'"),
        ("[gates]\nmin_pass_rate = '0.9'\n", "[gates] min_pass_rate must be a number, got a st"),
        ("[gates]\nmin_pass_rate = true\n", "min_pass_rate must be a number, got a boolean"),
        ("[gates]\nmin_pass_rate = 0\n", "[gates] min_pass_rate: MinPassRate: minimum must be"),
        ("[gates]\nmax_p95_latency_ms = -5\n", "max_p95_latency_ms: MaxP95Latency: maximum"),
        ("[gates]\nmax_mean_cost_usd = -1\n", "max_mean_cost_usd: MaxMeanCost: maximum"),
        ("[graders]\nexact = 1\n", "[graders] exact must be true or false, got an integer"),
        ("[graders]\nregex = '('\n", "[graders] regex: "),
        ("[graders]\nregex = 3\n", "regex must be true, false or a pattern"),
        ("graders = 1\n", "[graders] must be a table, got an integer"),
        ("[gates]\ngrader_minimum = 0.8\n", "grader_minimum must be a table, got a number"),
        (
            "[gates]\ngrader_minimum = {exact = 0.8}\n",
            "grader_minimum.exact: [graders] does not enable 'exact'; enabled: none",
        ),
        (
            "[graders]\nexact = true\n[gates]\ngrader_minimum = {recall = 0.8}\n",
            "grader_minimum: unknown key 'recall'",
        ),
        (
            "[graders]\nexact = true\n[gates]\ngrader_minimum = {exact = 'high'}\n",
            "grader_minimum.exact must be a number, got a string",
        ),
    ],
)
def test_a_bad_gate_file_is_one_error_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_gate_file(text)
    line = str(caught.value)
    assert message in line, line
    assert line.startswith("gates.toml") and "\n" not in line.strip(), line
