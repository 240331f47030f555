"""One reference per op: the numpy math of every op lives once, in ``evermind/ops/<op>.py``.

The kernel tests, ``CpuMamba``, the CPU trainer and the embedding tuner all import it. This
test lists the ops, checks each has its four files under the one name (shader, launcher,
reference, kernel test) and its forward/backward functions, that each fast path beside a
reference (``FAST_PATHS``) has a test comparing the two, and scans the AST of every other
module under ``src/evermind`` for a second implementation: a function named like an op (or an
old ``*_ref``), or one of the characteristic formulas that used to be written out again (the
softplus, Adam's bias correction and denominator, RMS, log-sum-exp, row L2 norms, the scan's
``-exp(A_log)`` and ``exp(delta * A)``, the embedding scatter, a numpy sampler). The next-token
sampler is standard-library code (it runs in the tab) and has its one home in
``evermind/model/sampling.py``.

Run against the tree before the ops/ redesign (commit 54dd249), :func:`duplicates` reports 90
findings: model/cpu_ops.py, the twelve kernels/*_ref.py, model/cpu.py (pooling, scatter,
-exp(A_log), the inline recurrent step), train/cpu_backend.py (AdamW, log-sum-exp),
train/contrastive.py (pooling, log-softmax, Adam), inference.py (numpy sampler,
log-sum-exp) and model/gpu_infer.py (the sampler).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import evermind

SRC = Path(evermind.__file__).parent
ROOT = SRC.parent.parent

#: op -> (its reference functions, whether it has a backward). Named like the shader.
OPS: dict[str, tuple[tuple[str, ...], bool]] = {
    "elementwise": (
        ("sigmoid", "silu_fwd", "silu_bwd", "softplus_fwd", "softplus_bwd", "mul_bwd"),
        True,
    ),
    "rmsnorm": (("rmsnorm_fwd", "rmsnorm_bwd"), True),
    "conv1d": (("conv1d_fwd", "conv1d_bwd"), True),
    "selective_scan": (
        ("selective_scan_fwd", "selective_scan_bwd", "scan_step", "selective_scan_y"),
        True,
    ),
    "recurrent_step": (
        ("causal_conv1d_silu", "conv_step", "ssm_step", "gather_rows", "scatter_rows"),
        False,
    ),
    "cross_entropy": (("cross_entropy_fwd", "cross_entropy_bwd", "mean_loss"), True),
    "embedding": (("embedding_fwd", "embedding_bwd"), True),
    "matmul": (("matmul_fwd", "linear_fwd", "linear_bwd"), True),
    "pool": (("pool_fwd", "pool_bwd", "mean_pool_fwd", "mean_pool_bwd"), True),
    "embed_loss": (
        ("centre_fwd", "cosine_loss_fwd", "cosine_loss_bwd", "embed_loss_fwd", "embed_loss_bwd"),
        True,
    ),
    "topk": (("cosine_scores", "topk"), False),
    "grad_norm": (("global_norm", "clip_scale", "clip_grad_norm_torch"), False),
    "adamw": (("adamw_step",), False),
    "ssd": (
        ("ssd_fwd", "ssd_bwd", "ssd_step", "ssd_decode_step", "ssd_scan_sequential", "segment_sum"),
        True,
    ),
    "moe": (
        ("moe_route", "moe_fwd", "moe_bwd", "load_balance_loss", "load_balance_bwd"),
        True,
    ),
}

#: Ops whose numpy reference has landed before its kernel: op -> (functions, has backward).
#: Each has its reference in ``ops/`` and its test ``tests/unit/test_<op>.py``, and no shader
#: yet; when the shader lands the op moves to ``OPS`` (the test below fails until it does).
PENDING_KERNELS: dict[str, tuple[tuple[str, ...], bool]] = {}

#: Fast CPU paths beside a reference: module -> its op. Each says native-only and has a test,
#: ``tests/unit/test_<module>.py``, that imports it and the op's reference and compares them
#: (state-spaces/mamba keeps ``selective_scan_ref`` beside the fast path the same way).
FAST_PATHS: dict[str, str] = {"selective_scan_fast": "selective_scan", "ssd_fast": "ssd"}

#: The one home of the sampler (standard library, shared by the tab and the native runtime).
SAMPLER_HOME = SRC / "model" / "sampling.py"

#: Function names that are (or were) a copy of an op: every op function above, their aliases
#: and the old ``*_ref`` names.
OP_NAME = re.compile(
    r"_ref$|selective_scan|scan_step|ssm_step|conv_step|rmsnorm|softplus|silu|sigmoid"
    r"|(^|_)adamw?(_|$)|mean_l2|cross_entropy|softmax|xent|conv1d|^_?pool_(fwd|bwd)$"
    r"|clip_grad|global_norm|clip_scale|^_?embedding_(fwd|bwd)$|cosine_scores|^_?topk$"
    r"|^_?matmul(_fwd|_bwd)?$|^_?linear_(fwd|bwd)$|^_?ssd_|segment_sum"
    r"|^_?moe_(route|fwd|bwd)$|load_balance",
    re.IGNORECASE,
)
SAMPLER_NAME = re.compile(r"^_?sample(_logits|_token)?$")


def _dotted(node: ast.AST) -> str:
    """``np.linalg.norm`` for an attribute chain, ``x`` for a name, '' otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _calls(node: ast.AST, *names: str) -> bool:
    """Whether ``node`` contains a call to one of ``names`` (e.g. ``np.exp``)."""
    return any(isinstance(n, ast.Call) and _dotted(n.func) in names for n in ast.walk(node))


def _mentions(node: ast.AST, pattern: str) -> bool:
    """Whether a name, attribute or string key in ``node`` matches ``pattern``."""
    rx = re.compile(pattern)
    return any(
        (isinstance(n, ast.Name) and rx.search(n.id))
        or (isinstance(n, ast.Attribute) and rx.search(n.attr))
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and rx.search(n.value))
        for n in ast.walk(node)
    )


def _imports_numpy(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "numpy" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy":
            return True
    return False


def _formula(node: ast.AST) -> str | None:
    """The op whose characteristic formula ``node`` spells out, if any."""
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        keywords = {k.arg for k in node.keywords}
        if name == "np.logaddexp" or (name == "np.log1p" and _calls(node, "np.exp")):
            return "softplus (ops.elementwise)"
        if name == "np.tanh":
            return "sigmoid / silu (ops.elementwise)"
        if name == "np.sqrt" and (_calls(node, "np.mean") or _mentions(node, r"^mean$")):
            return "RMS of rmsnorm (ops.rmsnorm)"
        if name == "np.log" and _calls(node, "np.exp"):
            return "log-sum-exp of softmax cross-entropy (ops.cross_entropy)"
        if name == "np.linalg.norm" and "axis" in keywords:
            return "row L2 norms of mean-pool + L2 (ops.pool)"
        if name == "np.exp" and _mentions(node, r"^(delta|dt)"):
            return "the scan's decay exp(delta * A) (ops.selective_scan)"
        if name == "np.add.at":
            return "the embedding scatter (ops.embedding)"
        if name.endswith(".choice") and "p" in keywords:
            return "a numpy sampler (model.sampling)"
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and _calls(node.operand, "np.exp")
        and _mentions(node.operand, r"A_log")
    ):
        return "A = -exp(A_log) of the scan (ops.selective_scan)"
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow) and _mentions(node.left, r"^(beta|b)[12]$"):
            return "Adam's bias correction beta ** t (ops.adamw)"
        if isinstance(node.op, ast.Add) and (
            (_calls(node.left, "np.sqrt") and _mentions(node.right, r"eps"))
            or (_calls(node.right, "np.sqrt") and _mentions(node.left, r"eps"))
        ):
            return "Adam's denominator sqrt(v) + eps (ops.adamw)"
    return None


def duplicates_in(source: str, where: str, numpy_module: bool | None = None) -> list[str]:
    """Findings in one module's source: ``'where:line: what'`` per suspect definition."""
    tree = ast.parse(source)
    uses_numpy = _imports_numpy(tree) if numpy_module is None else numpy_module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if SAMPLER_NAME.search(node.name):
                found.append(f"{where}:{node.lineno}: defines sampler {node.name}()")
            elif uses_numpy and OP_NAME.search(node.name):
                found.append(f"{where}:{node.lineno}: defines op-like {node.name}()")
        if uses_numpy:
            what = _formula(node)
            if what is not None:
                found.append(f"{where}:{getattr(node, 'lineno', 0)}: {what}")
    return found


def duplicates(src: Path) -> list[str]:
    """Every finding under a package root ``src`` (``.../src/evermind``), ops/ excepted."""
    found = []
    for path in sorted(src.rglob("*.py")):
        relative = path.relative_to(src)
        if relative.parts[0] == "ops" or relative == SAMPLER_HOME.relative_to(SRC):
            continue
        found += duplicates_in(path.read_text(encoding="utf-8"), str(relative))
    return found


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_has_one_name_across_shader_launcher_reference_and_test(op: str) -> None:
    for path in (
        ROOT / "shaders" / f"{op}.wgsl",
        SRC / "kernels" / f"{op}.py",
        SRC / "ops" / f"{op}.py",
        ROOT / "tests" / "shaders" / f"test_{op}.py",
    ):
        assert path.is_file(), f"{op}: {path.relative_to(ROOT)} is missing"
    module = importlib.import_module(f"evermind.ops.{op}")
    assert "native-only" in (module.__doc__ or ""), f"ops/{op}.py: say native-only"
    functions, has_backward = OPS[op]
    for name in functions:
        assert callable(getattr(module, name, None)), f"ops/{op}.py lacks {name}()"
    backward = [name for name in functions if name.endswith("_bwd")]
    forward = [name for name in functions if name.endswith("_fwd")]
    if has_backward:
        assert backward and forward, f"ops/{op}.py: a forward and a backward (*_fwd, *_bwd)"
    else:
        assert not backward, f"{op}: has a backward, mark it so in OPS"


def test_every_ops_module_is_listed() -> None:
    modules = {p.stem for p in (SRC / "ops").glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(OPS) | set(PENDING_KERNELS) | set(FAST_PATHS), (
        "each ops/ module is one op named like its shader, a reference whose kernel is pending "
        "(PENDING_KERNELS), or a fast path listed in FAST_PATHS"
    )
    assert not list((SRC / "kernels").glob("*_ref.py")), "references live in ops/, not kernels/"
    assert not (SRC / "model" / "cpu_ops.py").exists(), "CpuMamba's ops are evermind.ops"


def test_each_pending_op_has_its_reference_and_test_and_no_shader_yet() -> None:
    # One test over the list (not one per op): an empty list passes instead of skipping.
    for op, (functions, has_backward) in sorted(PENDING_KERNELS.items()):
        assert op not in OPS, f"{op}: listed both as an op and as pending"
        shader = ROOT / "shaders" / f"{op}.wgsl"
        assert not shader.is_file(), (
            f"{op}: its shader has landed; move it from PENDING_KERNELS to OPS"
        )
        test = ROOT / "tests" / "unit" / f"test_{op}.py"
        assert test.is_file(), f"ops/{op}.py: {test.relative_to(ROOT)} is missing"
        module = importlib.import_module(f"evermind.ops.{op}")
        assert "native-only" in (module.__doc__ or ""), f"ops/{op}.py: say native-only"
        for name in functions:
            assert callable(getattr(module, name, None)), f"ops/{op}.py lacks {name}()"
        assert has_backward == any(name.endswith("_bwd") for name in functions)


@pytest.mark.parametrize("fast", sorted(FAST_PATHS))
def test_each_fast_path_is_tested_against_its_reference(fast: str) -> None:
    op = FAST_PATHS[fast]
    assert op in OPS, f"ops/{fast}.py: its op {op} is not a listed op"
    module = importlib.import_module(f"evermind.ops.{fast}")
    assert "native-only" in (module.__doc__ or ""), f"ops/{fast}.py: say native-only"
    test = ROOT / "tests" / "unit" / f"test_{fast}.py"
    assert test.is_file(), f"ops/{fast}.py: {test.relative_to(ROOT)} is missing"
    imported = {
        node.module
        for node in ast.walk(ast.parse(test.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
    }
    for needed in (f"evermind.ops.{op}", f"evermind.ops.{fast}"):
        assert needed in imported, f"{test.name} does not import {needed}"


def test_no_second_implementation_of_an_op_outside_ops() -> None:
    found = duplicates(SRC)
    assert not found, (
        "a second implementation of an op outside evermind/ops (import the one in ops/, or "
        "model/sampling.py for the sampler):\n" + "\n".join(found)
    )


# Each formula the scan must catch, as it was written before ops/ (one line each).
REMOVED = {
    "softplus": "y = np.where(v > 20.0, v, np.logaddexp(0.0, v))",
    "softplus log1p": "y = np.log1p(np.exp(x))",
    "sigmoid": "s = 0.5 * (1.0 + np.tanh(0.5 * x))",
    "rms": "rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)",
    "log-sum-exp": "logz = np.log(np.sum(np.exp(z - z.max(1, keepdims=True)), 1))",
    "pool": "norm = np.linalg.norm(pooled, axis=1, keepdims=True)",
    "A": "A = -np.exp(w['A_log'])",
    "decay": "ssm *= np.exp(delta[:, :, None] * A)",
    "scatter": "np.add.at(grad, ids, dh)",
    "adam bias": "m_hat = first / (1 - beta1**step)",
    "adam denom": "p -= lr * m / (np.sqrt(v) / np.sqrt(bias2) + t.eps)",
    "numpy sampler": "token = int(rng.choice(probs.size, p=probs))",
    "ref name": "def selective_scan_ref(x):\n    return x",
    "op name": "def pool_fwd(hidden, mask):\n    return hidden",
    "sampler": "def _sample(logits):\n    return 0",
}


@pytest.mark.parametrize("case", sorted(REMOVED))
def test_the_scan_catches_each_removed_duplicate(case: str) -> None:
    assert duplicates_in(REMOVED[case], case, numpy_module=True), f"{case} not caught"


def test_the_scan_ignores_launchers_and_plain_math() -> None:
    launcher = "class Elementwise:\n    def silu_fwd(self, x, out, n):\n        return 0\n"
    assert not duplicates_in(launcher, "launcher", numpy_module=False)
    plain = "y = x @ w.T\nn = float(np.linalg.norm(v))\nz = np.exp(-t)\n"
    assert not duplicates_in(plain, "plain", numpy_module=True)
