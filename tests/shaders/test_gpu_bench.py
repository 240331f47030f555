"""benchmarks/gpu.sh: the prepared GPU run, in its --quick mode on whatever adapter is here
(the session's one run, ``gpu_quick_run`` in tests/conftest.py)."""

from __future__ import annotations

import pytest
from benchmarks import gpu

from tests.conftest import GpuQuickRun


def test_quick_run_prints_one_table_with_every_stage(gpu_quick_run: GpuQuickRun) -> None:
    done, out = gpu_quick_run.done, gpu_quick_run.out
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    table = (out / "gpu_bench.md").read_text()
    assert table.strip() in done.stdout
    lines = table.splitlines()
    assert lines[0] == "| stage | what | value | unit | detail |"
    stages = {line.split("|")[1].strip() for line in lines[2:]}
    assert {"setup", "kernels", "step", "train", "decode", "serve"} <= stages, stages
    assert "| decode | wgpu-py batch 4 |" in table
    assert "failed" not in table and "timed out" not in table
    assert (out / "gpu_bench.json").exists()


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
