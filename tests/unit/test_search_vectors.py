"""search.vectors.VectorIndex: numpy and pure-Python paths agree; in-place updates; guarded
numpy import."""

from __future__ import annotations

import random
import sys
import textwrap

import pytest

from evermind.errors import ShapeError
from evermind.search.cosine import normalise
from evermind.search.vectors import VectorIndex
from tests import procs
from tests.unit.test_memory_helpers import SRC


def _random_vectors(n: int, dim: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {f"k{i}": [rng.uniform(-1, 1) for _ in range(dim)] for i in range(n)}


@pytest.mark.parametrize("n,dim", [(1, 3), (63, 7), (65, 17), (131, 5)])
def test_numpy_and_python_paths_agree_through_updates(n: int, dim: int) -> None:
    vectors = _random_vectors(n, dim, seed=n)
    fast, slow = VectorIndex(use_numpy=True), VectorIndex(use_numpy=False)
    assert fast.uses_numpy and not slow.uses_numpy
    for index in (fast, slow):
        for key, v in vectors.items():
            index.add(key, v)
        index.add("k0", [1.0] * dim)  # overwrite in place
        index.add("gone", [0.5] * dim)
        index.remove(f"k{n // 2}")  # swap-remove from the middle
        index.remove("gone")  # and from the end
        index.remove("absent")
    live = {k: v for k, v in vectors.items() if k != f"k{n // 2}"}
    if "k0" in live:
        live["k0"] = [1.0] * dim
    query = _random_vectors(1, dim, seed=999)["k0"]
    got_fast, got_slow = fast.search(query, 10), slow.search(query, 10)
    print(
        "max |fast - slow| =",
        max((abs(a[1] - b[1]) for a, b in zip(got_fast, got_slow, strict=True)), default=0),
    )
    assert [k for k, _ in got_fast] == [k for k, _ in got_slow]
    for (_, a), (_, b) in zip(got_fast, got_slow, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    q = normalise(query)
    for key, cos in got_slow:
        ref = sum(x * y for x, y in zip(normalise(live[key]), q, strict=True))
        assert cos == pytest.approx(ref, abs=1e-5)
        assert fast.cosine_to(key, q) == pytest.approx(ref, abs=1e-5)
        assert slow.cosine_to(key, q) == pytest.approx(ref, abs=1e-5)
    assert fast.cosine_to("missing", q) is None and slow.cosine_to("missing", q) is None
    assert len(fast) == len(live) == len(slow)
    some = next(iter(live), None)
    if some is not None:
        assert fast.cosine(some, some) == pytest.approx(1.0, abs=1e-6)


def test_search_filters_and_limits() -> None:
    index = VectorIndex()
    index.add("a", [1, 0]), index.add("b", [0.9, 0.1]), index.add("c", [0, 1])
    assert [k for k, _ in index.search([1, 0], 2)] == ["a", "b"]
    assert [k for k, _ in index.search([1, 0], 2, accept=lambda k: k != "a")] == ["b", "c"]
    assert index.search([1, 0], 0) == []


def test_dimension_and_finiteness_are_checked() -> None:
    index = VectorIndex()
    index.add("a", [1.0, 0.0, 0.0])
    with pytest.raises(ShapeError, match="dimension 3"):
        index.add("b", [1.0, 0.0])
    with pytest.raises(ShapeError, match="NaN"):
        index.add("c", [float("nan"), 0.0, 1.0])


def test_module_works_with_numpy_blocked() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["numpy"] = None  # makes 'import numpy' raise ImportError
        from evermind.search.vectors import VectorIndex
        index = VectorIndex()
        assert not index.uses_numpy
        index.add("a", [1.0, 0.0]); index.add("b", [0.0, 1.0])
        assert index.search([1.0, 0.1], 1)[0][0] == "a"
        print("ok")
        """
    )
    out = procs.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_batched_cosines_equal_the_one_by_one_ones_on_both_paths() -> None:
    rng = random.Random(5)
    dim = 24
    vectors = {f"k{i}": [rng.gauss(0, 1) for _ in range(dim)] for i in range(40)}
    query = normalise([rng.gauss(0, 1) for _ in range(dim)])
    keys = ["k3", "missing", "k17", "k3", "k39"]
    for use_numpy in (True, False):
        index = VectorIndex(use_numpy=use_numpy)
        for key, vector in vectors.items():
            index.add(key, vector)
        index.remove("k20")  # a moved row is read where it now lives
        got = index.cosines_to([*keys, "k20"], query)
        want = [index.cosine_to(key, query) for key in [*keys, "k20"]]
        assert got[1] is None and got[-1] is None
        assert got == pytest.approx(want, abs=1e-6)
        matrix = index.cosine_matrix(keys)
        for i, a in enumerate(keys):
            for j, b in enumerate(keys):
                assert matrix[i][j] == pytest.approx(index.cosine(a, b), abs=1e-6)
        assert matrix[0][0] == pytest.approx(1.0, abs=1e-6) and matrix[1] == [0.0] * len(keys)
