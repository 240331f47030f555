"""``benchmarks/`` and ``evals/`` import in one direction, and the package imports neither.

The direction: a benchmark may use the evaluations' machinery (the development sets'
finder :func:`evals.require`, the cache replay's request set :mod:`evals.cache_replay`);
an evaluation never imports a benchmark. ``src/evermind`` (the installed package) imports
neither folder: they are not in the wheel. Every import counts — module level,
function-local, relative, and ``importlib.import_module("...")`` with a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Folder → the top-level packages of the checkout its files must not import.
FORBIDDEN = {
    "evals": {"benchmarks"},
    "src/evermind": {"benchmarks", "evals"},
}


def imported_roots(source: str, package: str) -> set[str]:
    """The top-level names ``source`` imports; relative imports resolve inside ``package``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(package if node.level else (node.module or "").split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value.split(".")[0])
    return found


def _violations(folder: str, forbidden: set[str]) -> list[str]:
    base = ROOT / folder
    package = base.name
    out = []
    for path in sorted(base.rglob("*.py")):
        bad = imported_roots(path.read_text(encoding="utf-8"), package) & forbidden
        out += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(bad)]
    return out


def test_the_checker_sees_every_kind_of_import() -> None:
    source = (
        "import benchmarks.gateway\n"
        "def f():\n"
        "    from evals.cache_replay import prelude\n"
        "    import importlib\n"
        "    importlib.import_module('tests.upstreams')\n"
        "from . import sibling\n"
    )
    assert imported_roots(source, "mine") == {
        "benchmarks",
        "evals",
        "importlib",
        "tests",
        "mine",
    }


def test_the_folders_exist() -> None:
    for folder in (*FORBIDDEN, "benchmarks"):
        assert any((ROOT / folder).rglob("*.py")), f"{folder}: no Python files under {ROOT}"


def test_evals_never_import_benchmarks_and_the_package_neither() -> None:
    problems = [line for folder, names in FORBIDDEN.items() for line in _violations(folder, names)]
    assert not problems, (
        "imports against the direction (benchmarks may import evals, never the reverse; "
        "src/evermind imports neither): " + "; ".join(problems)
    )
