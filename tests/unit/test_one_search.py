"""One home for search: the maths memory, the cache and the retriever share lives in
``evermind/search/``, once.

This test scans the AST of every module under ``src/evermind`` outside ``search/`` for a
second implementation, by name or by formula:

- a function named like a search function (``dot``, ``calibrate``, ``pairwise_cosines``,
  ``reciprocal_rank_fusion``, ``fuse_convex``, ``mmr``, ``idf``, ``zscores``, ``below_floor``,
  ``jaccard``, ``pearson``, ... and the private ``_fuse``, ``_convex``, ``_dot``), or a class
  named like a search structure (``VectorIndex``, ``ScanIndex``, ``MatrixIndex``,
  ``BM25Index``, ``TermStats``, ``*Calibration``);
- a cosine scan: a dot product written out (``sum``/``fsum`` of ``x * y`` over a ``zip``, or
  ``sum(map(operator.mul, a, b))``), or a numpy one (``@``, ``np.dot``, ``np.einsum``,
  ``np.inner``, ``np.matmul``, ``.dot(...)``) over stored vectors;
- a calibration: the nearest-rank quantile ``int(q * (len(v) - 1) + 0.5)``;
- a fusion: RRF's ``1 / (k + rank)``; convex fusion's ``(1 − w)·a + w·b``; a z-score
  ``(x − mean) / std``; min-max scaling ``(v − lo) / (hi − lo)``;
- an IDF: the logarithm of a ratio, ``log(N / df)`` in any smoothing;
- MMR's ``λ·rel − (1 − λ)·sim``;
- a term overlap: Jaccard's ``len(a & b) / len(a | b)``.

The model's own arithmetic (``ops/``, ``kernels/``, ``model/``, ``train/``, ``package/``,
``gpu/``, ``tokenizer/``, and ``embedder/``, which builds and fine-tunes the base embedder's
table: matrix products, the cosine loss, the schedule) is not search and is the business of
``test_one_reference.py``.

Run against the tree before ``search/`` existed (main at 9abd57b), :func:`duplicates` reports
60 findings in twelve modules: cache/decide.py (``Calibration``, ``calibrate``,
``calibration_pairs``, ``pairwise_cosines`` and its ``fsum`` scan, the quantile,
``TermStats`` and its IDF), cache/index.py and cache/matrix.py (``dot``, ``VectorIndex``,
``ScanIndex``, ``MatrixIndex``, the matrix products), memory/vectors.py (``VectorIndex``,
``_dot``, four numpy scans), memory/gpu_vectors.py (``GpuVectorIndex``), memory/ranking.py
(``BM25Index`` and its IDF, RRF, MMR, z-scores, Pearson, Jaccard), memory/recall.py (its
``Calibration`` and quantile, ``_below_floor``, ``_fuse``, ``_convex`` with its convex mix
and min-max, ``_mmr``), memory/compaction.py (``idf_table``), retrieval/fusion.py
(``fuse_convex``, ``fuse_rrf``, ``mmr``, ``_unit_scale``), vectorstore/inprocess.py and
cache/l2_sqlite.py (the numpy scans and the Gram matrix) and studio/session.py (three dot
products written out).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import evermind

SRC = Path(evermind.__file__).parent

#: The one home.
HOME = "search"
#: Packages whose arithmetic is the model's, not search's (see the module docstring).
MODEL_MATHS = frozenset(
    {"ops", "kernels", "model", "train", "package", "gpu", "tokenizer", "embedder"}
)

SEARCH_FUNCTION = re.compile(
    r"^_?(dot|exact_dot|pairwise_cosines|cosine_scores|gram|calibrate|calibration_pairs"
    r"|measure_calibration|relevance_calibration|reciprocal_rank_fusion|rrf|fuse|fuse_convex"
    r"|fuse_rrf|convex|unit_scale|zscores?|mmr|mmr_order|idf|idf_table|bm25_idf|below_floor"
    r"|jaccard|pearson|quantile)$"
)
SEARCH_CLASS = re.compile(
    r"^_?(\w*VectorIndex|ScopedIndex|ScanIndex|MatrixIndex|BM25Index|TermStats|\w*Calibration)$"
)
#: Calls that multiply vectors in numpy (and ``array.dot(...)``, unless it is search's ``dot``).
NUMPY_PRODUCTS = {"np.dot", "np.einsum", "np.inner", "np.matmul", "np.vdot", "numpy.dot"}
SEARCH_MODULES = {"cosine", "search", "evermind.search", "evermind.search.cosine"}


def _dotted(node: ast.AST) -> str:
    """``np.linalg.norm`` for an attribute chain, ``x`` for a name, '' otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _mentions(node: ast.AST, pattern: str) -> bool:
    """Whether a name or attribute in ``node`` matches ``pattern``."""
    rx = re.compile(pattern)
    return any(
        (isinstance(n, ast.Name) and rx.search(n.id))
        or (isinstance(n, ast.Attribute) and rx.search(n.attr))
        for n in ast.walk(node)
    )


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (1, 1.0) and node.value is not True


def _one_minus(node: ast.AST) -> ast.AST | None:
    """``x`` when ``node`` is ``1 - x`` (or ``1.0 - x``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_one(node.left):
        return node.right
    return None


def _factors(node: ast.AST) -> list[ast.AST]:
    """The operands of a product ``a * b * c`` (the node itself when it is no product)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _complementary(a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` are products, one with a factor ``1 - x``, the other ``x``
    (``1 - w + w * d``, an interpolation towards 1, is no mix of two scores)."""
    if not all(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) for n in (a, b)):
        return False
    for one, other in ((a, b), (b, a)):
        for factor in _factors(one):
            weight = _one_minus(factor)
            if weight is not None and any(ast.dump(weight) == ast.dump(f) for f in _factors(other)):
                return True
    return False


def _written_out_dot(node: ast.Call) -> bool:
    """``sum(x * y for x, y in zip(a, b))`` (or ``fsum``), or ``sum(map(operator.mul, a, b))``."""
    if _dotted(node.func) not in ("sum", "math.fsum", "fsum") or not node.args:
        return False
    arg = node.args[0]
    if isinstance(arg, ast.Call) and _dotted(arg.func) == "map" and arg.args:
        return _dotted(arg.args[0]) in ("operator.mul", "mul")
    if not isinstance(arg, ast.GeneratorExp | ast.ListComp) or len(arg.generators) != 1:
        return False
    element, loop = arg.elt, arg.generators[0]
    return (
        isinstance(element, ast.BinOp)
        and isinstance(element.op, ast.Mult)
        and isinstance(element.left, ast.Name)
        and isinstance(element.right, ast.Name)
        and element.left.id != element.right.id
        and isinstance(loop.iter, ast.Call)
        and _dotted(loop.iter.func) == "zip"
    )


def _call_formula(node: ast.Call) -> str | None:
    """The search formula a call spells out: a dot product, an IDF, a quantile."""
    name = _dotted(node.func)
    if _written_out_dot(node):
        return "a dot product written out (search.cosine)"
    if name in NUMPY_PRODUCTS or (
        name.endswith(".dot") and name.rpartition(".")[0] not in SEARCH_MODULES
    ):
        return "a numpy vector product (search.rows)"
    if name in ("math.log", "np.log", "log") and node.args:
        ratio = any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for n in ast.walk(node.args[0])
        )
        if ratio:
            return "the logarithm of a ratio, an IDF (search.terms)"
    if name == "int" and node.args:
        inner = ast.dump(node.args[0])
        if "id='len'" in inner and "value=0.5" in inner:
            return "a nearest-rank quantile, a calibration (search.calibration)"
    return None


def _is_op(node: ast.AST, op: type[ast.operator]) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, op)


def _division_formula(left: ast.AST, right: ast.AST) -> str | None:
    """The search formula ``left / right`` spells out: RRF, a z-score, min-max, Jaccard."""
    if _is_one(left) and _is_op(right, ast.Add) and _mentions(right, r"rank"):
        return "reciprocal-rank fusion 1 / (k + rank) (search.fusion)"
    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub):
        if _mentions(left.right, r"mean") and _mentions(right, r"^(std|sd|sigma|stdev)$"):
            return "a z-score (search.fusion)"
        if (
            isinstance(right, ast.BinOp)
            and isinstance(right.op, ast.Sub)
            and not isinstance(right.left, ast.Constant)  # (s - t) / (1 - t): a share, no range
            and ast.dump(left.right) == ast.dump(right.right)
        ):
            return "min-max scaling (search.fusion.unit_scale)"
    if isinstance(left, ast.Call) and _dotted(left.func) == "len" and left.args:
        union = _mentions(right, r"union") or (
            isinstance(right, ast.Call) and bool(right.args) and _is_op(right.args[0], ast.BitOr)
        )
        if _is_op(left.args[0], ast.BitAnd) and union:
            return "a Jaccard overlap (search.terms)"
    return None


def _formula(node: ast.AST) -> str | None:
    """The search formula ``node`` spells out, if any."""
    if isinstance(node, ast.Call):
        return _call_formula(node)
    if not isinstance(node, ast.BinOp):
        return None
    if isinstance(node.op, ast.MatMult):
        return "a matrix product, a cosine scan (search.rows)"
    if isinstance(node.op, ast.Div):
        return _division_formula(node.left, node.right)
    if isinstance(node.op, ast.Add | ast.Sub) and _complementary(node.left, node.right):
        if isinstance(node.op, ast.Add):
            return "a convex mix (1 - w)·a + w·b (search.fusion)"
        return "maximal marginal relevance λ·a - (1 - λ)·b (search.mmr)"
    return None


def duplicates_in(source: str, where: str) -> list[str]:
    """Findings in one module's source: ``'where:line: what'`` per suspect definition."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if SEARCH_FUNCTION.search(node.name):
                found.append(f"{where}:{node.lineno}: defines search function {node.name}()")
        elif isinstance(node, ast.ClassDef) and SEARCH_CLASS.search(node.name):
            found.append(f"{where}:{node.lineno}: defines search class {node.name}")
        what = _formula(node)
        if what is not None:
            found.append(f"{where}:{getattr(node, 'lineno', 0)}: {what}")
    return found


def duplicates(src: Path) -> list[str]:
    """Every finding under a package root ``src`` (``.../src/evermind``), search/ and the
    model's packages excepted."""
    found = []
    for path in sorted(src.rglob("*.py")):
        relative = path.relative_to(src)
        if relative.parts[0] == HOME or relative.parts[0] in MODEL_MATHS:
            continue
        found += duplicates_in(path.read_text(encoding="utf-8"), str(relative))
    return found


def test_no_second_search_implementation_outside_search() -> None:
    found = duplicates(SRC)
    print("\n".join(found))
    assert not found, (
        "search maths outside evermind/search (call the one in evermind.search):\n"
        + "\n".join(found)
    )


def test_the_home_holds_what_the_scan_looks_for() -> None:
    """The scan is not vacuous: run over search/ itself it finds each kind it looks for."""
    found = []
    for path in sorted((SRC / HOME).glob("*.py")):
        found += duplicates_in(path.read_text(encoding="utf-8"), path.name)
    text = "\n".join(found)
    for kind in (
        "search function dot()",
        "search function calibrate()",
        "search function reciprocal_rank_fusion()",
        "search function fuse_convex()",
        "search function mmr_order()",
        "search function idf()",
        "search class VectorIndex",
        "search class ScanIndex",
        "search class MatrixIndex",
        "search class TermStats",
        "a dot product written out",
        "a matrix product",
        "nearest-rank quantile",
        "reciprocal-rank fusion",
        "a convex mix",
        "maximal marginal relevance",
        "a z-score",
        "min-max scaling",
        "the logarithm of a ratio",
        "a Jaccard overlap",
    ):
        assert kind in text, f"the scan no longer finds {kind!r} in search/"


# Each formula the scan must catch, as it was written outside search/ before the move.
REMOVED = {
    "fsum scan": "c = math.fsum(x * y for x, y in zip(a, b, strict=True))",
    "sum scan": "cosine = sum(x * y for x, y in zip(va, vb, strict=True))",
    "map scan": "d = float(sum(map(operator.mul, a, b)))",
    "numpy scan": "scores = self._matrix[rows] @ q",
    "gram": "gram = sample @ sample.T",
    "einsum": 'products = np.einsum("ij,ij->i", matrix[left], matrix[right])',
    "np.dot": "s = np.dot(rows, query)",
    "quantile": "v = ordered[min(len(ordered) - 1, int(0.99 * (len(ordered) - 1) + 0.5))]",
    "rrf": "fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank)",
    "convex": "mixed = {k: (1.0 - weight) * z_lex[k] + weight * z_dense[k] for k in keys}",
    "mmr": "value = lam * relevance[best] - (1.0 - lam) * max_sim[best]",
    "zscore": "z = {key: (x - mean) / std for key, x in values.items()}",
    "min-max": "scaled = (mixed[key] - bottom) / (top - bottom)",
    "bm25 idf": "idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))",
    "cache idf": "idf = math.log((self.n + 1) / (self.df.get(term, 0) + 1))",
    "probe idf": "t = {w: math.log((count + 1) / (df + 0.5)) for w, df in frequency.items()}",
    "jaccard": "overlap = len(a & b) / len(a | b)",
    "calibrate": "def calibrate(cosines):\n    return None",
    "private fuse": "def _fuse(found, opts):\n    return {}",
    "floor": "def _below_floor(snapshot, query, found):\n    return False",
    "vector index": "class VectorIndex:\n    pass",
    "gpu index": "class GpuVectorIndex(VectorIndex):\n    pass",
    "calibration class": "class Calibration:\n    pass",
}


@pytest.mark.parametrize("case", sorted(REMOVED))
def test_the_scan_catches_each_removed_duplicate(case: str) -> None:
    assert duplicates_in(REMOVED[case], case), f"{case} not caught"


def test_the_scan_ignores_callers_and_plain_math() -> None:
    callers = (
        "from evermind.search.fusion import convex\n"
        "fused = convex(bm25, cosines, weight, basis)\n"
        "calibration = measure_calibration(queries, cosines)\n"
        "def calibration(snapshot):\n    return relevance_calibration(keys, cos, terms)\n"
    )
    assert not duplicates_in(callers, "callers")
    plain = (
        "norm = math.sqrt(sum(x * x for x in values))\n"
        "share = len(mine & theirs) / max(len(mine), len(theirs))\n"
        "bits = ce / math.log(2)\n"
        "left = 1.0 - fraction\n"
        "total = a * b + c * d\n"
        "half = 1 / (n + 1)\n"
        "confidence = (score - tau) / (1.0 - tau)\n"
        "factor = 1.0 - weight + weight * decay\n"
    )
    assert not duplicates_in(plain, "plain")
