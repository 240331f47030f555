"""``evermind eval run CASES --gate GATES --against MODEL`` against a real loopback server.

The command runs as a user runs it (a child process, ``python -m evermind.cli``) and talks
to :class:`tests.upstreams.OpenAIUpstream` (a real OpenAI Chat Completions server on
127.0.0.1, which answers ``Answer to: <question>``) through the official ``openai`` client.
What is proven: a passing gate file exits 0; a failing one exits 1 naming the failed gate;
a file with no gate exits 1 as vacuous; a bad gate file exits 2 with one line and sends
nothing; the gateway's ``evermind.cost_usd`` reaches the cost gate; the latency the server
adds is measured; and the old ``evermind eval --model --text-file`` form still works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs
from tests.factories import tiny_package
from tests.upstreams import OpenAIUpstream

ROOT = Path(__file__).resolve().parents[2]
#: The answers the loopback server gives: "Answer to: <question>".
CASES = [
    {"id": "port", "input": "port 7420", "answer": "Answer to: port 7420", "contains": "7420"},
    {"id": "delay", "input": "delay 2s", "answer": "Answer to: delay 2s", "contains": ["2s"]},
    {"id": "name", "input": "name", "answer": "Answer to: name", "pattern": "^Answer"},
]
PASSING = """
[graders]
exact = true
contains = true
regex = true

[gates]
min_pass_rate = 1.0
grader_minimum = {exact = 1.0, contains = 1.0}
max_p95_latency_ms = 60000
max_mean_latency_ms = 60000
"""
#: The server waits this long before each reply, so the measured latency is at least this.
LATENCY_S = 0.15


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(latency_s=LATENCY_S) as upstream:
        yield upstream


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(case) + "\n" for case in CASES))
    return path


def _eval_run(
    server: OpenAIUpstream, cases: Path, gates: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    gate_file = cases.parent / "gates.toml"
    gate_file.write_text(gates)
    command = [sys.executable, "-m", "evermind.cli", "eval", "run", str(cases)]
    command += ["--gate", str(gate_file), "--against", "gpt-loopback"]
    command += ["--base-url", server.url + "/v1", "--token", server.api_key, *extra]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return procs.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_a_passing_gate_file_exits_0(server: OpenAIUpstream, cases: Path) -> None:
    before = len(server.requests)
    out = _eval_run(server, cases, PASSING)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cases.jsonl against gpt-loopback: 3 cases" in out.stdout
    assert "grader exact:answer           100.0%" in out.stdout
    assert "gates: PASS" in out.stdout and "FAIL" not in out.stdout
    assert "eval [" in out.stderr  # the progress bar, on stderr only
    sent = server.requests[before:]
    assert sorted(r.body["messages"][-1]["content"] for r in sent) == sorted(
        c["input"] for c in CASES
    )
    assert {r.body["model"] for r in sent} == {"gpt-loopback"}


def test_json_output_carries_latency_and_the_gateways_cost(
    server: OpenAIUpstream, cases: Path
) -> None:
    reply = {
        "id": "chatcmpl-priced",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-loopback",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Answer to: port 7420"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6},
        "evermind": {"cache": "miss", "cached": False, "cost_usd": 0.003},
    }
    server.script(200, reply, times=3)  # every case is answered with this priced reply
    out = _eval_run(
        server, cases, "[graders]\ncontains = true\n[gates]\nmax_mean_cost_usd = 0.002\n", "--json"
    )
    assert out.returncode == 1, out.stdout + out.stderr
    document = json.loads(out.stdout)
    report, gates = document["report"], document["gates"]
    assert report["mean_cost_usd"] == pytest.approx(0.003)
    assert [r["cost_usd"] for r in report["results"]] == pytest.approx([0.003] * 3)
    assert gates["passed"] is False
    assert gates["verdicts"] == [
        {
            "gate": "mean cost ≤ $0.002",
            "passed": False,
            "vacuous": False,
            "detail": "mean $0.003000 > $0.002",
        }
    ]
    assert all(r["latency_ms"] > 0 for r in report["results"])
    assert report["latency_ms"]["measured"] == 3


def test_a_failing_gate_exits_1_naming_it(server: OpenAIUpstream, cases: Path) -> None:
    gates = PASSING.replace("max_p95_latency_ms = 60000", "max_p95_latency_ms = 50")
    out = _eval_run(server, cases, gates, "--concurrency", "3")
    assert out.returncode == 1, out.stdout + out.stderr
    verdicts = out.stdout[out.stdout.index("gates: FAIL") :].splitlines()
    failed = [line for line in verdicts if line.strip().startswith("FAIL ")]
    assert len(failed) == 1 and "p95 latency ≤ 50 ms: p95" in failed[0], verdicts
    p95 = float(failed[0].split("p95 ")[-1].split(" ms")[0])
    assert p95 >= LATENCY_S * 1000 * 0.99  # the server's delay is part of what is measured
    assert "PASS  pass rate ≥ 1" in out.stdout  # the other gates still pass


def test_a_gate_file_with_no_gate_exits_1_as_vacuous(server: OpenAIUpstream, cases: Path) -> None:
    out = _eval_run(server, cases, "[graders]\nexact = true\n")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "gates: none were given (vacuous: FAIL)" in out.stdout


def test_a_gate_over_no_evidence_exits_1_as_vacuous(server: OpenAIUpstream, cases: Path) -> None:
    # no grader: every case is skipped, so the pass rate is over nothing
    out = _eval_run(server, cases, "[gates]\nmin_pass_rate = 0.5\n")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL (vacuous)  pass rate ≥ 0.5: cases: nothing was graded" in out.stdout


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        ("[gates]\nmin_pas_rate = 0.9\n", "[gates]: unknown key 'min_pas_rate'"),
        ("[gates]\nmax_p95_latency_ms = 'fast'\n", "max_p95_latency_ms must be a number"),
        ("[gates\n", "not TOML"),
    ],
)
def test_a_bad_gate_file_exits_2_with_one_line(
    server: OpenAIUpstream, cases: Path, gates: str, message: str
) -> None:
    before = len(server.requests)
    out = _eval_run(server, cases, gates)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("error: ") and "gates.toml" in out.stderr
    assert message in out.stderr
    assert len(server.requests) == before  # nothing was asked


def test_a_case_whose_input_is_not_text_exits_2(server: OpenAIUpstream, tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "a", "input": {"q": 1}}\n')
    out = _eval_run(server, cases, PASSING)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "case 'a': input must be a string" in out.stderr


def test_the_old_eval_form_still_scores_a_package(tmp_path: Path) -> None:
    model = tmp_path / "tiny.evermind"
    model.write_bytes(tiny_package(steps=0))
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    base = [sys.executable, "-m", "evermind.cli", "eval"]
    out = procs.run(
        [*base, "--model", str(model), "--text-file", str(text)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert isinstance(json.loads(out.stdout), dict)
    out = procs.run([*base, "--model", str(model)], capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert out.stderr == (
        "evermind eval: error: the following arguments are required: --text-file "
        "(see evermind eval --help)\n"
    )
