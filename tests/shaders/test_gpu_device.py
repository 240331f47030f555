"""The native transport: compile errors with file/line/column, buffer checks, plans."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import GPUError, ShaderCompileError, ShapeError
from evermind.gpu import base as gpu_base
from evermind.kernels.elementwise import Elementwise
from tests.conftest import read_f32


def test_compile_error_names_file_line_and_column(device, monkeypatch) -> None:
    source = "@compute @workgroup_size(1)\nfn main() {\n  let a = 1;\n  y = 2;\n}\n"
    monkeypatch.setattr(gpu_base, "load_shader", lambda name: source)
    with pytest.raises(ShaderCompileError) as exc:
        device.kernel("broken_for_test")
    err = exc.value
    print(err)
    assert err.shader == "broken_for_test.wgsl"
    assert (err.line, err.column) == (4, 3)
    assert "broken_for_test.wgsl:4:3" in str(err)


def test_unknown_entry_point_is_a_gpu_error(device) -> None:
    with pytest.raises(GPUError, match=r"elementwise.wgsl:no_such_entry"):
        device.kernel("elementwise", "no_such_entry")


def test_write_outside_buffer_is_refused(device) -> None:
    buf = device.buffer(16, label="small")
    with pytest.raises(ShapeError, match="overflow its 16 bytes"):
        device.write(buf, np.zeros(5, np.float32))
    with pytest.raises(ShapeError, match="multiples of 4"):
        device.write(buf, b"abc")


def test_kernel_too_small_buffer_is_refused(device) -> None:
    ops = Elementwise(device)
    small, big = device.buffer(8, label="small"), device.buffer(64, label="big")
    with pytest.raises(ShapeError, match=r"\('small'\) holds 2 f32 values but the op needs 16"):
        ops.silu_fwd(small, big, 16)


def test_plan_replays_recorded_dispatches(device) -> None:
    n = 1000
    ops = Elementwise(device)
    x = device.upload(np.ones(n, np.float32), label="x")
    acc = device.buffer(4 * n, label="acc")
    plan = device.plan("accumulate twice").add(
        [ops.accumulate(x, acc, n), ops.accumulate(x, acc, n)]
    )
    for _ in range(3):
        plan.run()
    assert (read_f32(device, acc, n) == 6.0).all()


def test_pipelines_are_cached(device) -> None:
    a = device.kernel("elementwise", "add", {"WG": 256})
    b = device.kernel("elementwise", "add", {"WG": 256})
    c = device.kernel("elementwise", "add", {"WG": 64})
    assert a is b and a is not c
