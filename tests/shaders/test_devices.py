"""``--device``: resolving cpu|gpu|auto, the decoder factory on wgpu-py, /healthz says which."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import evermind
from evermind.errors import ConfigError
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.decode import Decoder
from evermind.model.gpu_decode import GpuBatchDecoder
from evermind.runtime import devices
from evermind.runtime.app import create_app
from evermind.runtime.config import RuntimeConfig
from tests.factories import tiny_package
from tests.numerics import assert_close


def test_cpu_needs_no_adapter_and_bad_names_are_refused() -> None:
    assert devices.resolve_device("cpu") == devices.ServingDevice("cpu", "numpy")
    with pytest.raises(ConfigError, match="cpu, gpu, auto"):
        devices.resolve_device("tpu")
    with pytest.raises(ConfigError, match="device: expected"):
        RuntimeConfig(device="cuda")


def test_gpu_forces_any_adapter_and_auto_skips_cpu_adapters(device) -> None:
    shared = devices.gpu_device()
    assert devices.resolve_device("gpu").kind == "gpu"
    auto = devices.resolve_device("auto")
    assert auto.kind == ("cpu" if shared.is_cpu_adapter else "gpu"), auto
    if shared.is_cpu_adapter:
        assert "CPU adapter" in auto.adapter


def test_decoder_for_gpu_decodes_like_the_numpy_model() -> None:
    model = evermind.load(tiny_package("devices", "1.0.0", steps=5))
    decoder = devices.decoder_for(model, "gpu", 2)
    assert isinstance(decoder, devices.SharedGpuDecoder) and decoder.slots == 2
    assert isinstance(decoder.inner, GpuBatchDecoder) and isinstance(decoder, Decoder)
    prompt = model.tokenizer.encode("the cat")
    got = decoder.prefill([1], [prompt])
    state = model.cpu.init_state(1)
    for token in prompt:
        want, state = model.cpu.step(np.array([token]), state)
    assert_close(got[0], want[0], atol=1e-4, rtol=1e-4, name="gpu prefill vs numpy")
    with pytest.raises(ConfigError, match="slots"):
        devices.decoder_for(model, "gpu", 0)


def test_healthz_says_which_device_serves(tmp_path) -> None:
    app = create_app(RuntimeConfig(data_dir=tmp_path, device="cpu"))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        body = client.get("/healthz").json()
    assert body["device"] == {"kind": "cpu", "adapter": "numpy"}


def test_decoder_for_cpu_is_the_numpy_decoder() -> None:
    model = evermind.load(tiny_package("devices", "1.0.0", steps=5))
    decoder = devices.decoder_for(model, "cpu", 3)
    assert isinstance(decoder, CpuDecoder) and decoder.slots == 3


def _greedy_completions(tmp_path, device: str, package: bytes) -> list[str]:
    app = create_app(RuntimeConfig(data_dir=tmp_path / device, device=device))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.post("/v1/models", content=package).status_code == 201
        assert client.get("/healthz").json()["device"]["kind"] == device
        texts = []
        for prompt in ("the cat", "a", "memories are recalled by meaning"):
            body = {"model": "evermind/served", "prompt": prompt, "max_tokens": 8}
            response = client.post("/v1/completions", json={**body, "temperature": 0})
            assert response.status_code == 200, response.text
            texts.append(response.json()["choices"][0]["text"])
    return texts


def test_the_runtime_serves_from_the_gpu_decoder_as_from_numpy(tmp_path, monkeypatch) -> None:
    package = tiny_package("served", "1.0.0", steps=20)
    steps: list[int] = []
    real_step = GpuBatchDecoder.step

    def counted(self, slots, tokens):  # type: ignore[no-untyped-def]
        steps.append(len(slots))
        return real_step(self, slots, tokens)

    monkeypatch.setattr(GpuBatchDecoder, "step", counted)
    gpu_texts = _greedy_completions(tmp_path, "gpu", package)
    assert steps, "the GPU decoder never stepped"
    assert gpu_texts == _greedy_completions(tmp_path, "cpu", package)
    assert any(gpu_texts)


def test_gpu_decoders_of_two_models_in_two_threads_stay_exact() -> None:
    import threading

    model = evermind.load(tiny_package("devices", "1.0.0", steps=5))
    prompts = [[1, 2, 3], [4, 5]]
    alone = devices.decoder_for(model, "gpu", 2)
    want = [alone.prefill([0, 1], prompts)] + [alone.step([0, 1], [t, t]) for t in range(8)]
    results: dict[int, list[np.ndarray]] = {}

    def run(index: int) -> None:
        decoder = devices.decoder_for(model, "gpu", 2)
        out = [decoder.prefill([0, 1], prompts)]
        results[index] = out + [decoder.step([0, 1], [t, t]) for t in range(8)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got in results.values():
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert len(results) == 2
