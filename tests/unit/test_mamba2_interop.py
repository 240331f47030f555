"""A Mamba-2 `.evermind` package unzips into a folder that transformers' Mamba2ForCausalLM
loads, with the same logits as our CPU model (torch CPU, float32); our recurrent step gives
the logits of HF's cached generation; and our Mamba-2 block is HF's on weights loaded straight
into both."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import evermind
from evermind.model.config import MambaConfig
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.model.init import init_params
from tests.factories import tiny_package
from tests.numerics import assert_close

torch = pytest.importorskip("torch", reason="torch is the interop reference (test extra)")
transformers = pytest.importorskip("transformers", reason="transformers is the interop reference")

pytestmark = pytest.mark.slow

# Float32 on both sides; HF runs its scan in float32 and sums in another order (the chunked
# einsums), so logits of magnitude ~1 agree to a few float32 ulps times the depth.
ATOL = RTOL = 1e-4


def test_unzipped_mamba2_package_loads_in_transformers_with_the_same_logits(tmp_path) -> None:
    data = tiny_package(name="interop2", steps=6, block="mamba2")
    path = tmp_path / "interop2.evermind"
    path.write_bytes(data)
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tmp_path / "unzipped")
    config = json.loads((tmp_path / "unzipped" / "config.json").read_text())
    assert config["architectures"] == ["Mamba2ForCausalLM"]
    assert config["model_type"] == "mamba2"
    hf = transformers.Mamba2ForCausalLM.from_pretrained(tmp_path / "unzipped").eval()
    ours = evermind.load(path)
    assert isinstance(ours.cpu, CpuMamba2)
    # Trained weights, not init: from_pretrained must not have re-initialised A_log / dt_bias.
    trained = ours.cpu.params["backbone.layers.0.mixer.dt_bias"]
    assert_close(hf.backbone.layers[0].mixer.dt_bias.detach().numpy(), trained, atol=0, rtol=0)
    # Several chunks of 5 and a partial last one.
    ids = np.array([ours.tokenizer.encode("The quick brown fox remembers what agents learn, TSR.")])
    assert ids.shape[1] % ours.config.chunk_size
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    assert_close(ours.cpu.forward(ids), theirs, atol=ATOL, rtol=RTOL, name="logits")


def test_block_matches_transformers_on_perturbed_weights_with_several_groups() -> None:
    # One head per group would hide a group/head mix-up; 6 heads in 3 groups, L = 13.
    config = MambaConfig(
        d_model=24, n_layer=2, vocab_size=37, d_state=5, block="mamba2", head_dim=8,
        n_groups=3, chunk_size=4,
    )  # fmt: skip
    model = CpuMamba2(config, init_params(config, 1))
    rng = np.random.default_rng(0)
    for value in model.params.values():  # every weight non-trivial (norms, D, A, biases)
        value += rng.normal(scale=0.2, size=value.shape).astype(value.dtype)
    hf = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**config.to_hf_config()))
    state = {name: torch.from_numpy(value.copy()) for name, value in model.params.items()}
    result = hf.load_state_dict(state, strict=False)
    assert result.missing_keys == ["lm_head.weight"] and not result.unexpected_keys  # tied
    ids = rng.integers(0, config.vocab_size, size=(2, 13))
    with torch.no_grad():
        theirs = hf.eval()(torch.from_numpy(ids)).logits.numpy()
    assert_close(model.forward(ids), theirs, atol=ATOL, rtol=RTOL, name="logits")


def test_hf_config_round_trips_and_rejects_a_clamp() -> None:
    config = MambaConfig.preset("nano", 300, block="mamba2")
    hf = config.to_hf_config()
    assert MambaConfig.from_hf_config(hf) == config
    assert transformers.Mamba2Config(**hf).num_heads == config.n_heads == 4
    with pytest.raises(evermind.errors.ConfigError, match="time_step_limit"):
        MambaConfig.from_hf_config({**hf, "time_step_limit": [0.0, 0.5]})


def test_our_recurrent_step_matches_transformers_cached_generation(tmp_path) -> None:
    # HF's generate runs its recurrent path (cache, causal_conv1d_update,
    # selective_state_update); every step's logits must be ours from CpuMamba2.step.
    path = tmp_path / "gen2.evermind"
    path.write_bytes(tiny_package(name="interop2", steps=6, block="mamba2"))
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tmp_path / "unzipped")
    hf = transformers.Mamba2ForCausalLM.from_pretrained(tmp_path / "unzipped").eval()
    ours = evermind.load(path)
    ids = np.array([ours.tokenizer.encode("The quick brown fox")])
    with torch.no_grad():
        out = hf.generate(
            torch.from_numpy(ids), max_new_tokens=8, do_sample=False, output_logits=True,
            return_dict_in_generate=True, eos_token_id=None, pad_token_id=0,
        )  # fmt: skip
    tokens = out.sequences[0].numpy()[ids.shape[1] :]
    state = ours.cpu.init_state(1)
    for token in ids[0]:
        logits, state = ours.cpu.step(np.array([token]), state)
    for k, theirs in enumerate(out.logits):
        assert_close(logits[0], theirs.numpy()[0], atol=ATOL, rtol=RTOL, name=f"step {k}")
        logits, state = ours.cpu.step(np.array([tokens[k]]), state)
