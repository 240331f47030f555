"""The default corpus: standard-library docstrings (``evermind.train.corpus``)."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from evermind.errors import ConfigError
from evermind.train.corpus import SKIPPED_MODULES, harvest_stdlib_docstrings
from tests import procs

_HASH_SCRIPT = (
    "import hashlib, sys; from evermind.train.corpus import harvest_stdlib_docstrings as h; "
    "t = h(int(sys.argv[1])); print(len(t.encode()), hashlib.sha256(t.encode()).hexdigest())"
)


def test_harvest_respects_the_byte_budget() -> None:
    for budget in (1, 1000, 25_000):
        text = harvest_stdlib_docstrings(budget)
        assert len(text.encode("utf-8")) <= budget
        assert len(text.encode("utf-8")) > budget - 4  # cut at a character boundary
    first = harvest_stdlib_docstrings(25_000)
    assert first.startswith(harvest_stdlib_docstrings(1000))
    assert "Abstract Base Classes" in first  # abc is the first module in sorted order


def test_harvest_rejects_bad_budgets() -> None:
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ConfigError, match="max_bytes"):
            harvest_stdlib_docstrings(bad)  # type: ignore[arg-type]


@pytest.mark.slow
def test_full_harvest_is_deterministic_and_reaches_two_megabytes() -> None:
    """Two fresh interpreters (import side effects isolated) give the same 2 MB corpus."""
    results = []
    for _ in range(2):
        done = procs.run(
            [sys.executable, "-c", _HASH_SCRIPT, "2000000"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        results.append(done.stdout.split())
    assert results[0] == results[1]
    size, _digest = results[0]
    assert int(size) > 1_990_000


def test_skipped_modules_are_not_imported_by_the_harvest() -> None:
    script = (
        "import sys, json; from evermind.train.corpus import harvest_stdlib_docstrings as h; "
        "h(10**8); print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        + repr(sorted(SKIPPED_MODULES))
        + ")))"
    )
    done = procs.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == []
    assert hashlib.sha256(done.stdout.encode()).hexdigest()  # ran to the end
