"""Runs every kernel's browser cases natively, through the same harness the browser uses."""

from __future__ import annotations

import asyncio

import pytest

from evermind.kernels.harness import run_case
from tests.kernel_cases import all_cases

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_natively(device, case) -> None:
    case.check(asyncio.run(run_case(device, case.spec())))
