"""Tests of the model definition: MambaConfig, presets, parameter layout and init_params."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import sys
import textwrap
from array import array

import numpy as np
import pytest

from evermind.errors import ConfigError
from evermind.model import PRESETS, MambaConfig, init_params
from evermind.model.init import _exp, _expm1, _log
from tests import procs

TINY = MambaConfig(d_model=6, n_layer=2, vocab_size=11, d_state=3)


# ---- MambaConfig -----------------------------------------------------------------------------


def test_defaults_and_derived_sizes() -> None:
    config = MambaConfig(d_model=40, n_layer=3, vocab_size=300)
    assert (config.d_state, config.d_conv, config.expand) == (16, 4, 2)
    assert config.d_inner == 80
    assert config.dt_rank == 3  # ceil(40 / 16)
    assert isinstance(config.dt_rank, int)
    assert MambaConfig(d_model=32, n_layer=1, vocab_size=5, dt_rank=7).dt_rank == 7
    assert config.rms_eps == 1e-5
    assert (config.dt_min, config.dt_max, config.dt_init_floor, config.dt_scale) == (
        0.001,
        0.1,
        1e-4,
        1.0,
    )


def test_config_is_frozen_hashable_and_replaceable() -> None:
    config = MambaConfig(d_model=16, n_layer=2, vocab_size=50)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 8  # type: ignore[misc]
    assert config == MambaConfig(d_model=16, n_layer=2, vocab_size=50)
    assert hash(config) == hash(MambaConfig(d_model=16, n_layer=2, vocab_size=50))
    wider = dataclasses.replace(config, d_model=64)
    assert wider.d_model == 64 and wider.dt_rank == 1  # replace keeps the resolved dt_rank


@pytest.mark.parametrize(
    ("name", "d_model", "n_layer"), [("nano", 128, 4), ("small", 256, 6), ("base", 512, 8)]
)
def test_presets(name: str, d_model: int, n_layer: int) -> None:
    config = MambaConfig.preset(name, vocab_size=4096, eos_token_id=3)
    assert (config.d_model, config.n_layer, config.vocab_size) == (d_model, n_layer, 4096)
    assert config.dt_rank == math.ceil(d_model / 16)
    assert config.eos_token_id == 3
    assert set(PRESETS) == {"nano", "small", "base"}


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"\['base', 'nano', 'small'\]"):
        MambaConfig.preset("huge", vocab_size=100)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 0}, "d_model: expected an int >= 1, got 0"),
        ({"n_layer": True}, "n_layer: expected an int"),
        ({"vocab_size": 10.0}, "vocab_size: expected an int"),
        ({"dt_rank": "full"}, "dt_rank: expected an int >= 1 or 'auto'"),
        ({"rms_eps": 0.0}, "rms_eps: expected a finite number > 0"),
        ({"rms_eps": float("nan")}, "rms_eps"),
        ({"dt_min": 0.5, "dt_max": 0.1}, "dt_min <= dt_max"),
        ({"dt_init_floor": -1.0}, "dt_init_floor: expected a finite number >= 0"),
        ({"eos_token_id": 20}, r"eos_token_id: expected an id in \[0, 20\)"),
        ({"pad_token_id": -1}, "pad_token_id: expected an int >= 0"),
    ],
)
def test_validation_errors(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"d_model": 8, "n_layer": 1, "vocab_size": 20}
    with pytest.raises(ConfigError, match=match):
        MambaConfig(**{**base, **kwargs})  # type: ignore[arg-type]


def test_hf_config_round_trip_and_contract_keys() -> None:
    config = MambaConfig(
        d_model=48, n_layer=3, vocab_size=500, d_state=8, pad_token_id=1, bos_token_id=2
    )
    hf = config.to_hf_config()
    assert hf["model_type"] == "mamba"
    assert hf["architectures"] == ["MambaForCausalLM"]
    assert (hf["hidden_size"], hf["num_hidden_layers"], hf["vocab_size"]) == (48, 3, 500)
    assert (hf["state_size"], hf["conv_kernel"], hf["expand"]) == (8, 4, 2)
    assert (hf["intermediate_size"], hf["time_step_rank"]) == (96, 3)
    assert hf["use_bias"] is False and hf["use_conv_bias"] is True
    assert hf["tie_word_embeddings"] is True and hf["residual_in_fp32"] is True
    assert hf["hidden_act"] == "silu" and hf["time_step_init_scheme"] == "random"
    assert (hf["time_step_min"], hf["time_step_max"], hf["time_step_floor"]) == (1e-3, 0.1, 1e-4)
    assert (hf["pad_token_id"], hf["bos_token_id"], hf["eos_token_id"]) == (1, 2, 0)
    assert MambaConfig.from_hf_config(hf) == config
    hf["architectures"].append("edited")
    assert config.to_hf_config()["architectures"] == ["MambaForCausalLM"]


def test_from_hf_config_defaults_and_rejections() -> None:
    minimal = {"hidden_size": 16, "num_hidden_layers": 2, "vocab_size": 40}
    assert MambaConfig.from_hf_config(minimal) == MambaConfig(16, 2, 40)
    assert MambaConfig.from_hf_config({**minimal, "eos_token_id": [5]}).eos_token_id == 5
    assert MambaConfig.from_hf_config({**minimal, "pad_token_id": None}).pad_token_id == 0
    with pytest.raises(ConfigError, match=r"expected keys \['vocab_size'\]"):
        MambaConfig.from_hf_config({"hidden_size": 16, "num_hidden_layers": 2})
    with pytest.raises(ConfigError, match="expected use_bias=False, got True"):
        MambaConfig.from_hf_config({**minimal, "use_bias": True})
    with pytest.raises(ConfigError, match="tie_word_embeddings"):
        MambaConfig.from_hf_config({**minimal, "tie_word_embeddings": False})
    with pytest.raises(ConfigError, match="intermediate_size"):
        MambaConfig.from_hf_config({**minimal, "intermediate_size": 48})
    with pytest.raises(ConfigError, match="single int"):
        MambaConfig.from_hf_config({**minimal, "eos_token_id": [1, 2]})


def test_param_shapes_layout() -> None:
    config = MambaConfig(d_model=10, n_layer=2, vocab_size=37, d_state=5)
    shapes = config.param_shapes()
    names = list(shapes)
    assert names[0] == "backbone.embeddings.weight"
    assert names[-1] == "backbone.norm_f.weight"
    assert len(names) == 2 + 10 * config.n_layer
    d_inner, rank = 20, 1
    assert shapes["backbone.embeddings.weight"] == (37, 10)
    assert shapes["backbone.layers.1.norm.weight"] == (10,)
    assert shapes["backbone.layers.1.mixer.in_proj.weight"] == (2 * d_inner, 10)
    assert shapes["backbone.layers.1.mixer.conv1d.weight"] == (d_inner, 1, 4)
    assert shapes["backbone.layers.1.mixer.conv1d.bias"] == (d_inner,)
    assert shapes["backbone.layers.1.mixer.x_proj.weight"] == (rank + 10, d_inner)
    assert shapes["backbone.layers.1.mixer.dt_proj.weight"] == (d_inner, rank)
    assert shapes["backbone.layers.1.mixer.dt_proj.bias"] == (d_inner,)
    assert shapes["backbone.layers.1.mixer.A_log"] == (d_inner, 5)
    assert shapes["backbone.layers.1.mixer.D"] == (d_inner,)
    assert shapes["backbone.layers.1.mixer.out_proj.weight"] == (10, d_inner)
    assert "lm_head.weight" not in shapes
    per_layer = 10 + 2 * d_inner * 10 + d_inner * 4 + d_inner + (rank + 10) * d_inner
    per_layer += d_inner * rank + d_inner + d_inner * 5 + d_inner + 10 * d_inner
    assert config.n_params == 37 * 10 + 2 * per_layer + 10


def test_no_decay() -> None:
    decayed = {name for name in TINY.param_shapes() if not TINY.no_decay(name)}
    assert decayed == {"backbone.embeddings.weight"} | {
        f"backbone.layers.{i}.mixer.{p}.weight"
        for i in range(2)
        for p in ("in_proj", "conv1d", "x_proj", "dt_proj", "out_proj")
    }
    assert TINY.no_decay("backbone.norm_f.weight")
    with pytest.raises(ConfigError, match="param_shapes"):
        TINY.no_decay("lm_head.weight")


def test_browser_safe_modules_import_without_numpy() -> None:
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("numpy", "wgpu", "torch"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import evermind.model, evermind.model.config, evermind.model.init
        from evermind.model import MambaConfig, init_params
        init_params(MambaConfig(d_model=4, n_layer=1, vocab_size=7), 0)
        assert "numpy" not in sys.modules
        """
    )
    procs.run([sys.executable, "-c", code], check=True, timeout=60)


# ---- init_params -----------------------------------------------------------------------------


def digest(params: dict[str, array[float]]) -> str:
    hasher = hashlib.sha256()
    for name, values in params.items():
        if sys.byteorder == "big":  # the digest is of little-endian float32, as on x86/wasm
            values = array("f", values)
            values.byteswap()
        hasher.update(name.encode())
        hasher.update(values.tobytes())
    return hasher.hexdigest()


def test_init_is_deterministic_and_seed_dependent() -> None:
    first, again, other = init_params(TINY, 42), init_params(TINY, 42), init_params(TINY, 43)
    assert all(first[n].tobytes() == again[n].tobytes() for n in first)
    assert first["backbone.embeddings.weight"] != other["backbone.embeddings.weight"]
    # Known answer: the browser (Pyodide) must produce these very bytes for this config and
    # seed. Change it only together with a deliberate change of the init scheme.
    assert digest(first) == "d36bc745aba5a9354d33c4f26a95de1364c33908392093e3a72d44c934c20be9"


def test_init_shapes_and_types_match_param_shapes() -> None:
    params = init_params(TINY, 0)
    assert list(params) == list(TINY.param_shapes())
    for name, shape in TINY.param_shapes().items():
        assert params[name].typecode == "f"
        assert len(params[name]) == math.prod(shape), name


def test_init_values_follow_the_mamba_scheme() -> None:
    config = MambaConfig(d_model=64, n_layer=4, vocab_size=3000, d_state=16)
    shapes = config.param_shapes()
    params = {
        n: np.array(v, dtype=np.float64).reshape(shapes[n])
        for n, v in init_params(config, 7).items()
    }
    layer = "backbone.layers.2."
    expected_a_log = np.log(np.arange(1, 17, dtype=np.float64)).astype(np.float32)
    assert np.array_equal(params[layer + "mixer.A_log"], np.tile(expected_a_log, (128, 1)))
    assert np.all(params[layer + "mixer.D"] == 1)
    assert np.all(params[layer + "norm.weight"] == 1)
    assert np.all(params["backbone.norm_f.weight"] == 1)

    dt = np.logaddexp(0, params[layer + "mixer.dt_proj.bias"])  # softplus(bias) = initial dt
    assert dt.min() >= 0.001 * (1 - 1e-5) and dt.max() <= 0.1 * (1 + 1e-5)
    assert np.log(dt).std() > 0.5 * (np.log(0.1) - np.log(0.001)) / np.sqrt(12)  # log-uniform

    embedding = params["backbone.embeddings.weight"]
    assert abs(embedding.std() - 0.02) < 0.0005 and abs(embedding.mean()) < 0.0005
    kurtosis = np.mean(embedding**4) / np.mean(embedding**2) ** 2
    assert abs(kurtosis - 3.0) < 0.1  # normal, not uniform (1.8)

    bounds = {
        "mixer.in_proj.weight": 1 / math.sqrt(64),
        "mixer.x_proj.weight": 1 / math.sqrt(128),
        "mixer.out_proj.weight": 1 / math.sqrt(128) / math.sqrt(4),
        "mixer.conv1d.weight": 1 / math.sqrt(4),
        "mixer.conv1d.bias": 1 / math.sqrt(4),
        "mixer.dt_proj.weight": 1 / math.sqrt(config.dt_rank),
    }
    for suffix, bound in bounds.items():
        values = params[layer + suffix]
        assert np.abs(values).max() <= bound * (1 + 1e-6), suffix
        assert np.abs(values).max() > 0.9 * bound, suffix  # fills the interval
        assert abs(values.mean()) < 0.2 * bound, suffix


def test_arithmetic_only_transcendentals_match_math() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        x = math.exp(rng.uniform(-40, 40))
        assert _log(x) == pytest.approx(math.log(x), rel=1e-15, abs=1e-15)
        y = rng.uniform(-30, 30)
        assert _exp(y) == pytest.approx(math.exp(y), rel=1e-15)
        z = rng.uniform(-1, 1) * 10 ** rng.uniform(-9, 0.5)
        assert _expm1(z) == pytest.approx(math.expm1(z), rel=1e-15)
    assert _log(1.0) == 0.0 and _exp(0.0) == 1.0


def test_init_rejects_non_int_seed() -> None:
    with pytest.raises(ConfigError, match="int seed"):
        init_params(TINY, 1.5)  # type: ignore[arg-type]
