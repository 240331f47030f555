"""The Studio's worker API without WebGPU (natively, with the device made unavailable)."""

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
from tests.factories import run_sync, tiny_package


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*, fresh: bool = False) -> gpu.Device:
        raise NoAdapterError(
            "navigator.gpu.requestAdapter() returned null; use a browser with WebGPU"
        )

    monkeypatch.setattr(gpu, "open_device", refuse)
    monkeypatch.setattr(rpc, "_session", None, raising=False)


def call(fn: str, /, **kwargs: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads(run_sync(api.call(fn, json.dumps(kwargs))))
    return envelope


def test_boot_succeeds_without_a_gpu_and_says_why(no_gpu: None) -> None:
    envelope = call("boot")
    assert envelope["ok"], envelope
    facts = envelope["result"]
    assert facts["gpu"] is False and facts["transport"] == "cpu"
    assert facts["gpu_error"] == {
        "type": "NoAdapterError",
        "message": "navigator.gpu.requestAdapter() returned null; use a browser with WebGPU",
    }


def test_training_without_a_gpu_fails_in_words(no_gpu: None) -> None:
    assert call("corpus_add", name="a.txt", text="The quick brown fox jumps. " * 40)["ok"]
    assert call("tokenizer_train", vocab_size=280)["ok"]
    envelope = call("train_start", preset="nano", steps=2)
    assert not envelope["ok"]
    assert envelope["error"]["type"] == "NoAdapterError"


def test_an_opened_package_generates_and_exports_on_the_cpu(no_gpu: None) -> None:
    data = tiny_package()
    opened = call("package_load", data_b64=base64.b64encode(data).decode())
    assert opened["ok"] and opened["result"]["device"] == "cpu", opened
    out = call("generate", prompt="The quick", max_new_tokens=10, temperature=0.0, seed=0)
    assert out["ok"], out
    native = load(data).complete("The quick", max_new_tokens=10, temperature=0.0, seed=0)
    assert out["result"]["text"] == native.text and out["result"]["device"] == "cpu"
    exported = call("export_package", name="copy", version="0.1.1")
    assert exported["ok"], exported
    package = base64.b64decode(exported["result"]["data_b64"])
    again = load(package).complete("The quick", max_new_tokens=10, temperature=0.0, seed=0)
    assert again.text == native.text
    assert load(package).package.manifest["training"]["device"] == "cpu (browser)"
    # What needs the GPU model says so, in words, instead of "train a model first".
    refused = call("evaluate", text="The quick brown fox jumps over the lazy dog.")
    assert not refused["ok"] and refused["error"]["type"] == "NoAdapterError", refused
    assert "needs WebGPU" in refused["error"]["message"]


def test_an_opened_package_embeds_on_the_cpu_as_natively(no_gpu: None) -> None:
    data = tiny_package()
    assert call("package_load", data_b64=base64.b64encode(data).decode())["ok"]
    texts = ["The quick brown fox.", "A memory is kept in the browser."]
    out = call("embed", texts=texts)
    assert out["ok"], out
    got = np.array(out["result"]["vectors"])
    native = load(data).embed(texts)
    assert got.shape == native.shape
    assert np.max(np.abs(got - native)) < 1e-4
    cosine = call("similarity", a=texts[0], b=texts[1])["result"]["cosine"]
    assert abs(cosine - float(native[0] @ native[1])) < 1e-4
