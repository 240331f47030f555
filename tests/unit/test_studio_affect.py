"""The Studio's affect-head calls (natively, without WebGPU: an opened package on the CPU
path): fit from pasted lines in pure Python, classify, export; same head as the numpy fit."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from evermind import gpu
from evermind.errors import NoAdapterError
from evermind.model.inference import load
from evermind.studio import api, rpc
from evermind.train.affect import fit_affect
from tests.factories import run_sync, tiny_package

POSITIVE = [f"the quick brown fox {i} jumps and remembers" for i in range(7)]
NEGATIVE = [f"caches save repeated work {i} of state space" for i in range(7)]


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*, fresh: bool = False) -> gpu.Device:
        raise NoAdapterError("no WebGPU in this test")

    monkeypatch.setattr(gpu, "open_device", refuse)
    monkeypatch.setattr(rpc, "_session", None, raising=False)


def call(fn: str, /, **kwargs: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads(run_sync(api.call(fn, json.dumps(kwargs))))
    return envelope


def _lines() -> str:
    rows = [f"up\t{t}" for t in POSITIVE] + [f"down\t{t}" for t in NEGATIVE]
    return "# pasted in the tab\n" + "\n".join(rows) + "\n"


def test_the_tab_fits_exports_and_matches_the_numpy_fit(no_gpu: None) -> None:
    data = tiny_package(steps=3)
    assert call("package_load", data_b64=base64.b64encode(data).decode())["ok"]
    assert call("affect_info")["result"] == {"head": None, "current": False}
    trained = call("affect_train", lines=_lines())
    assert trained["ok"], trained
    result = trained["result"]
    assert result["labels"] == ["down", "up"] and result["train"] + result["held_out"] == 14
    assert 0 <= result["accuracy"] <= 1 and result["train_accuracy"] == 1.0
    native = fit_affect(load(data), POSITIVE + NEGATIVE, ["up"] * 7 + ["down"] * 7)
    assert native.metrics == {k: result[k] for k in ("accuracy", "macro_f1", "train_accuracy")}
    scored = call("affect_scores", texts=[POSITIVE[0], NEGATIVE[0]])
    assert scored["ok"], scored
    assert [row["label"] for row in scored["result"]["data"]] == ["up", "down"]
    exported = call("export_package", name="moody", version="0.2.0")
    assert exported["ok"], exported
    package = load(base64.b64decode(exported["result"]["data_b64"]))
    head = package.package.affect
    assert head is not None and head.labels == ("down", "up")
    tab_w = np.asarray(head.weight.to_float32())
    ref_w = np.asarray(native.head.weight.to_float32())
    print(f"max |tab - numpy| weight {np.abs(tab_w - ref_w).max():.2e}")
    np.testing.assert_allclose(tab_w, ref_w, rtol=1e-3, atol=1e-3 * np.abs(ref_w).max())
    got = package.affect([POSITIVE[0], NEGATIVE[0]])
    for row, want in zip(got, scored["result"]["data"], strict=True):
        assert row == pytest.approx(want["scores"], abs=1e-4)
    # The exported package opens with its head, which the next export carries again.
    assert call("package_load", data_b64=exported["result"]["data_b64"])["ok"]
    info = call("affect_info")["result"]
    assert info["current"] and info["head"]["labels"] == ["down", "up"]
    again = call("export_package", name="moody", version="0.2.1")["result"]["data_b64"]
    assert load(base64.b64decode(again)).package.affect is not None
    # Another model in the tab: the head is not carried over to it.
    other = tiny_package("other", steps=2)
    assert call("package_load", data_b64=base64.b64encode(other).decode())["ok"]
    assert call("affect_info")["result"]["head"] is None
    refused = call("affect_scores", texts=["x"])
    assert not refused["ok"] and "affect_train" in refused["error"]["message"]


def test_bad_pastes_fail_in_words(no_gpu: None) -> None:
    assert call("package_load", data_b64=base64.b64encode(tiny_package(steps=3)).decode())["ok"]
    no_tab = call("affect_train", lines="up the quick brown fox\n")
    assert not no_tab["ok"] and "line 1" in no_tab["error"]["message"]
    few = call("affect_train", lines="up\ta\nup\tb\ndown\tc\ndown\td\n")
    assert not few["ok"] and "at least 5" in few["error"]["message"]
    unknown = call("affect_train", lines=_lines(), labels=["up", "sideways"])
    assert not unknown["ok"] and "unknown label 'down'" in unknown["error"]["message"]
    assert call("affect_clear")["ok"]
