"""benchmarks/gpu.sh: the prepared GPU run, in its --quick mode on whatever adapter is here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from benchmarks import gpu

from tests import procs

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_one_table_with_every_stage(tmp_path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "EVERMIND_PYTHON": sys.executable}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    done = procs.run(  # a timeout kills gpu.sh with every stage it started
        [str(ROOT / "benchmarks" / "gpu.sh"), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    table = (tmp_path / "gpu_bench.md").read_text()
    assert table.strip() in done.stdout
    lines = table.splitlines()
    assert lines[0] == "| stage | what | value | unit | detail |"
    stages = {line.split("|")[1].strip() for line in lines[2:]}
    assert {"setup", "kernels", "step", "train", "decode", "serve"} <= stages, stages
    assert "| decode | wgpu-py batch 4 |" in table
    assert "failed" not in table and "timed out" not in table
    assert (tmp_path / "gpu_bench.json").exists()


def test_no_gpu_stops_before_any_stage(monkeypatch, capsys) -> None:
    monkeypatch.setattr(gpu, "probe", lambda: (False, "llvmpipe [CPU adapter]"))
    assert gpu.main(["--out", ""]) == 3
    assert "wgpu-py finds no GPU (llvmpipe [CPU adapter])" in capsys.readouterr().err


def test_a_stage_that_times_out_or_fails_is_one_row() -> None:
    slow = gpu.Stage(
        "slow", ["timeit", "-n", "1", "import time; time.sleep(5)"], 1, gpu.decode_rows
    )
    rows, doc, ok = gpu.run_stage(slow, 0.5)
    assert not ok and doc is None and rows[0][:2] == ("slow", "timed out")
    broken = gpu.Stage("broken", ["benchmarks.no_such_module"], 30, gpu.decode_rows)
    rows, doc, ok = gpu.run_stage(broken, 30)
    assert not ok and rows[0][1] == "failed (exit 1)"


@pytest.mark.parametrize(
    "stdout", ['{"a": 1}', 'progress\n{"a": 1}', 'progress\n{\n "a": 1\n}', '{"a":\n 1}']
)
def test_parse_json_finds_the_document(stdout) -> None:
    assert gpu.parse_json(stdout) == {"a": 1}
    assert gpu.parse_json("no json here") is None
