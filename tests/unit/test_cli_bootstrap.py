"""What ``make demo`` and ``make test`` install: the extras' split and the bootstrap's modes.

The demo set (``pyproject.toml``'s ``demo`` extra, resolved through the extras it names)
holds what the demo runs and none of the test-only packages (the llama.cpp binding that
builds from source, the Claude Agent SDK's bundled CLI, the test tools); the test set holds
the demo set and everything else. ``scripts/bootstrap.sh`` refuses a mode it does not know
before it installs anything, and the Makefile's ``demo`` bootstraps only the demo set.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests import procs

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
SELF = "evermind-memory["

#: What the demo runs: the runtime and its clients, headless Chromium, the local teacher, and
#: `build` (build/build_web.py makes the bundle's evermind wheel with it).
DEMO_NEEDS = {"fastapi", "uvicorn", "httpx", "openai", "playwright", "build"}
#: Test-only: a source build, a 180 MB bundled CLI, the test and lint tools, other extras, and
#: the teacher (torch, transformers), which the demo's shipped base embedder made unneeded.
TEST_ONLY = {
    "llama-cpp-python", "claude-agent-sdk", "hypothesis", "mypy", "pytest", "ruff", "wgpu",
    "pgserver", "psycopg", "qdrant-client", "gguf", "opentelemetry-sdk", "torch", "transformers",
}  # fmt: skip


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower()


def _closure(extra: str) -> set[str]:
    """The distribution names an extra pulls in, through the extras it names."""
    names: set[str] = set()
    for requirement in EXTRAS[extra]:
        if requirement.startswith(SELF):
            for inner in requirement[len(SELF) : requirement.index("]")].split(","):
                names |= _closure(inner.strip())
        else:
            names.add(_name(requirement))
    return names


def test_the_demo_set_is_what_the_demo_runs_and_nothing_test_only() -> None:
    demo = _closure("demo")
    assert demo >= DEMO_NEEDS, DEMO_NEEDS - demo
    assert not demo & TEST_ONLY, demo & TEST_ONLY


def test_the_test_set_holds_every_extra() -> None:
    test = _closure("test")
    for extra in EXTRAS:
        if extra != "test":
            assert _closure(extra) <= test, f"make test misses the {extra} extra"
    assert test >= TEST_ONLY


def test_bootstrap_refuses_an_unknown_mode_before_installing() -> None:
    out = procs.run(
        ["bash", str(ROOT / "scripts" / "bootstrap.sh"), "everything"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "usage: scripts/bootstrap.sh [demo|test]" in out.stderr
    assert "==>" not in out.stdout  # no step started


def test_make_demo_bootstraps_the_demo_set_and_make_test_the_test_set() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: bootstrap-demo$", makefile, re.M)
    assert re.search(r"^bootstrap-demo:\n\t\./scripts/bootstrap\.sh demo$", makefile, re.M)
    assert re.search(r"^test: bootstrap$", makefile, re.M)
    assert re.search(r"^bootstrap:\n\t\./scripts/bootstrap\.sh test$", makefile, re.M)
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert '--only-binary=:all: -e ".[demo]"' in script  # no compiler on the demo path
