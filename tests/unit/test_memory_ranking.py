"""Recall's weighting factors: importance and recency."""

from __future__ import annotations

import pytest

from evermind.memory.ranking import importance_factor, recency_factor


def test_weighting_factors() -> None:
    assert importance_factor(0.5, 0.2) == 1.0
    assert importance_factor(1.0, 0.2) == pytest.approx(1.2)
    assert importance_factor(0.0, 0.2) == pytest.approx(0.8)
    assert recency_factor(0.0, 10.0, 0.1) == 1.0
    assert recency_factor(10.0, 10.0, 0.1) == pytest.approx(0.95)
    assert recency_factor(1e9, 10.0, 0.1) == pytest.approx(0.9)
