"""The affect head fitted in the Studio on the GPU path (wgpu-py; lavapipe on CPU-only
machines): the tab's pooled vectors come from ``GpuEmbedder`` without a head, and the head
equals the numpy fit on the same package; after training moves the weights it is dropped."""

from __future__ import annotations

import base64

import numpy as np

import evermind
from evermind.train.affect import fit_affect
from tests.factories import TEXT, tiny_package
from tests.shaders.studio_rpc import call

POSITIVE = [f"the quick brown fox {i} jumps" for i in range(6)]
NEGATIVE = [f"caches save repeated work {i}" for i in range(6)]


def test_the_gpu_tab_fits_the_same_head_as_numpy(events) -> None:  # type: ignore[no-untyped-def]
    data = tiny_package(name="gpu-affect", steps=3)
    assert call("package_load", data_b64=base64.b64encode(data).decode())["device"] == "gpu"
    lines = "\n".join([f"up\t{t}" for t in POSITIVE] + [f"down\t{t}" for t in NEGATIVE])
    result = call("affect_train", lines=lines)
    native = fit_affect(evermind.load(data), POSITIVE + NEGATIVE, ["up"] * 6 + ["down"] * 6)
    assert result["labels"] == ["down", "up"]
    assert result["accuracy"] == native.metrics["accuracy"]
    exported = call("export_package", name="gpu-affect", version="0.1.1")
    head = evermind.load(base64.b64decode(exported["data_b64"])).package.affect
    assert head is not None
    tab_w = np.asarray(head.weight.to_float32())
    ref_w = np.asarray(native.head.weight.to_float32())
    print(f"max |gpu tab - numpy| weight {np.abs(tab_w - ref_w).max():.2e}")
    # The GPU pooled vectors differ from numpy's by float32 rounding only.
    np.testing.assert_allclose(tab_w, ref_w, atol=1e-3 * np.abs(ref_w).max())
    scores = call("affect_scores", texts=[POSITIVE[0], NEGATIVE[0]])["data"]
    assert [row["label"] for row in scores] == ["up", "down"]


def test_training_the_model_drops_the_head(events) -> None:  # type: ignore[no-untyped-def]
    call("corpus_add", name="notes.md", text=TEXT)
    call("tokenizer_train", vocab_size=300)
    tiny = {"d_model": 16, "n_layer": 1, "d_state": 4}
    call("train_start", config=tiny, steps=2, batch_size=2, seq_len=16, lr=1e-2)
    lines = "\n".join([f"up\t{t}" for t in POSITIVE] + [f"down\t{t}" for t in NEGATIVE])
    call("affect_train", lines=lines)
    assert call("affect_info")["current"] is True
    call("train_start", config=tiny, steps=2, batch_size=2, seq_len=16, lr=1e-2, seed=1)
    assert call("affect_info")["current"] is False
    exported = call("export_package", name="retrained", version="0.1.0")
    assert evermind.load(base64.b64decode(exported["data_b64"])).package.affect is None
