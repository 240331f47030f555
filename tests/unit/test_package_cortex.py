"""A model with the cortex as an `.evermind` package: its ``config.json`` says what it is
(``evermind_mamba_moe``, no ``transformers`` class) and ``transformers`` refuses it rather than
half-loading it; ``evermind.load`` reads it back with the logits of the CPU model it came from,
float32 and int8 (the cortex's weights stay float32); the schema refuses a tampered config."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

import evermind
from evermind.errors import ConfigError, PackageError
from evermind.job import JobConfig, export_package, split, tokenize
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.init import init_params
from evermind.package.schema import config_dims, expected_tensor_shapes
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import Trainer
from evermind.types import TrainConfig
from tests.factories import FIXED_TIME, TEXT, run_sync, tiny_tokenizer
from tests.numerics import assert_close

CORTEX = {"moe_experts": 4, "moe_top_k": 2, "moe_intermediate": 12, "moe_every": 1}


def _trained(dtype: str = "float32") -> tuple[bytes, MambaConfig, dict[str, np.ndarray]]:
    """A cortex package trained 4 CPU steps, its config and the float32 weights it holds."""
    tok = tiny_tokenizer()
    eos = tok.eos_id or 0
    config = MambaConfig(
        d_model=16, n_layer=2, vocab_size=tok.vocab_size, d_state=4, eos_token_id=eos,
        bos_token_id=eos, pad_token_id=eos, **CORTEX,
    )  # fmt: skip
    job = JobConfig(
        name="cortex", dtype=dtype, **CORTEX,
        train=TrainConfig(steps=4, batch_size=2, seq_len=16, lr=1e-2, warmup_steps=1, eval_every=0),
    )  # fmt: skip
    backend = CpuBackend(config, init_params(config, 0), job.train)
    train_ids, held = split(job, tokenize(tok, TEXT))
    result = run_sync(Trainer(backend, train_ids, held, job.train).run())
    params = backend.params()
    data = export_package(job, config, params, tok, result, "TEXT", "cpu", created_at=FIXED_TIME)
    shapes = config.param_shapes()
    return (
        data,
        config,
        {k: np.asarray(v, np.float32).reshape(shapes[k]) for k, v in params.items()},
    )


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MambaConfig, dict]:
    data, config, params = _trained()
    path = tmp_path_factory.mktemp("cortex") / "cortex.evermind"
    path.write_bytes(data)
    return path, config, params


def test_config_json_says_no_transformers_class_loads_it(package, tmp_path) -> None:
    path, _, _ = package
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tmp_path / "unzipped")
    written = json.loads((tmp_path / "unzipped" / "config.json").read_text())
    assert written["model_type"] == "evermind_mamba_moe"
    assert written["architectures"] == ["EvermindMambaMoeForCausalLM"]
    assert written["transformers_class"] is None and written["norm_topk_prob"] is False
    assert written["num_experts"] == 4 and written["moe_intermediate_size"] == 12
    transformers = pytest.importorskip(
        "transformers", reason="checks that transformers refuses the cortex (test extra)"
    )
    with pytest.raises((ValueError, KeyError)):  # we do not pretend to be a transformers model
        transformers.AutoConfig.from_pretrained(tmp_path / "unzipped")


def test_evermind_load_gives_the_cpu_models_logits(package) -> None:
    path, config, params = package
    model = evermind.load(path)
    assert model.config == config and sorted(model.cpu.cortex) == [0, 1]
    ids = np.array([model.tokenizer.encode("The cortex routes every token to two experts.")])
    expected = CpuMamba(config, params).forward(ids)
    assert_close(model.cpu.forward(ids), expected, atol=0, rtol=0, name="logits")
    # The runtime's batched decoder steps the cortex too: its logits after a prompt and one
    # more token are the parallel forward's.
    decoder = CpuDecoder(model, slots=2)
    after = decoder.prefill([1], [ids[0, :9].tolist()])
    scale = np.abs(expected).max()
    assert np.abs(after[0] - expected[0, 8]).max() <= 1e-5 * scale
    stepped = decoder.step([1], [int(ids[0, 9])])
    assert np.abs(stepped[0] - expected[0, 9]).max() <= 1e-5 * scale


def test_int8_export_keeps_the_cortex_float32_and_close_logits(package) -> None:
    _, config, params = package
    data, _, _ = _trained("int8")
    model = evermind.load(data)
    assert model.cpu.quantized and not [n for n in model.cpu.quantized if ".moe" in n]
    ids = np.array([model.tokenizer.encode("int8 projections, float cortex")])
    ref = CpuMamba(config, params).forward(ids)
    diff = np.abs(model.cpu.forward(ids) - ref).max()
    print(f"int8 vs float32 logits: max diff {diff:.3e} (scale {np.abs(ref).max():.2f})")
    assert diff < 0.05 * np.abs(ref).max()


def test_the_schema_refuses_a_cortex_config_that_pretends_or_lacks_keys(package) -> None:
    _, config, _ = package
    hf = config.to_hf_config()
    assert "backbone.layers.1.moe.experts.3.down_proj.weight" in expected_tensor_shapes(hf)
    assert set(expected_tensor_shapes(hf)) == set(config.param_shapes())
    with pytest.raises(PackageError, match="transformers_class"):
        config_dims({**hf, "transformers_class": "MambaForCausalLM"})
    with pytest.raises(PackageError, match="architectures"):
        config_dims({**hf, "architectures": ["MambaForCausalLM"]})
    with pytest.raises(PackageError, match="num_experts"):
        config_dims({k: v for k, v in hf.items() if k != "num_experts"})
    with pytest.raises(ConfigError, match="moe_top_k"):
        JobConfig(moe_experts=2, moe_top_k=3)
