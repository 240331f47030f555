"""``CpuMamba`` with the cortex (``moe_experts > 0``): the whole-model gradient of LM loss plus
load-balancing loss matches central finite differences in float64 (away from routing ties),
recurrent decoding equals the parallel forward, the CPU backend trains it and reports its
routing, and a config without the cortex is the plain Mamba one, byte for byte."""

from __future__ import annotations

import asyncio
import json
from array import array

import numpy as np
import pytest

from evermind.cli.progress import routing_text
from evermind.errors import ConfigError
from evermind.model import MambaConfig, init_params
from evermind.model.cpu import CpuMamba
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import Trainer
from evermind.types import Progress, TrainConfig
from tests.unit.test_model_cpu import numeric_grad, random_params, rel_error

GRAD_RTOL = 1e-6
#: Central differences with h = 1e-5 on a loss of order 1 carry ~1e-10 of round-off per entry:
#: a tensor whose whole gradient is ~1e-5 (dt_proj here) cannot show a relative error below
#: ~1e-5, so an absolute floor on ||analytic - numeric|| covers it.
GRAD_ATOL = 1e-9

#: Two layers, the cortex on both, 3 experts of width 4 (k = 2), a shared expert of width 5.
TINY = MambaConfig(
    d_model=6, n_layer=2, vocab_size=11, d_state=3, moe_experts=3, moe_top_k=2,
    moe_intermediate=4, moe_shared_intermediate=5, router_aux_loss_coef=0.3,
)  # fmt: skip

#: Smallest gap between the k-th and (k+1)-th router probability of any token in any cortex
#: layer in the FD inputs: a step of 1e-5 on one weight moves probabilities by far less.
MARGIN = 2e-3


def _margin(model: CpuMamba, ids: np.ndarray) -> float:
    _, cache = model.forward_train(ids)
    gaps = []
    for c in cache.cortex.values():
        ordered = -np.sort(-c.probs, axis=1)
        k = model.config.moe_top_k
        gaps.append(np.min(ordered[:, k - 1] - ordered[:, k]))
    return float(min(gaps))


def _model(config: MambaConfig, seed: int) -> CpuMamba:
    params = random_params(config, seed)
    for name in params:
        if name.endswith("moe.gate.weight"):
            params[name] *= 4  # spread the near-uniform router (not so far it saturates)
    return CpuMamba(config, params, dtype=np.float64)


def test_whole_model_gradient_matches_finite_differences() -> None:
    ids = np.random.default_rng(3).integers(0, TINY.vocab_size, (2, 5))
    targets = np.random.default_rng(4).integers(0, TINY.vocab_size, (2, 5))
    for seed in range(100):
        model = _model(TINY, seed)
        if _margin(model, ids) >= MARGIN:
            break
    assert _margin(model, ids) >= MARGIN
    loss, grads = model.loss_and_grads(ids, targets)
    routing = model.last_routing
    assert routing is not None
    assert loss == pytest.approx(routing["lm_loss"] + 0.3 * routing["aux_loss"], rel=1e-12)
    assert list(grads) == list(TINY.param_shapes())
    errors = {}
    for name, param in model.params.items():
        numeric = numeric_grad(lambda: model.loss_and_grads(ids, targets)[0], param)
        errors[name] = rel_error(grads[name], numeric)
        if np.linalg.norm(grads[name] - numeric) < GRAD_ATOL:  # at the FD noise floor
            errors[name] = 0.0
    for name, err in errors.items():
        print(f"model d[{name}]: rel err {err:.2e} (|grad| {np.linalg.norm(grads[name]):.2e})")
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] < GRAD_RTOL, f"{worst}: rel err {errors[worst]:.2e} >= {GRAD_RTOL}"


def test_the_aux_loss_gradient_is_part_of_the_router_gradient() -> None:
    ids = np.random.default_rng(3).integers(0, TINY.vocab_size, (2, 5))
    model = _model(TINY, 0)
    _, cache = model.forward_train(ids)
    dlogits = np.zeros((2, 5, TINY.vocab_size))
    with_aux = model.backward(cache, dlogits, aux_coef=1.0)["backbone.layers.0.moe.gate.weight"]
    without = model.backward(cache, dlogits)["backbone.layers.0.moe.gate.weight"]
    assert not without.any() and np.abs(with_aux).max() > 1e-6


@pytest.mark.parametrize("every", [1, 2])
def test_step_and_prefill_match_the_parallel_forward(every: int) -> None:
    config = MambaConfig(
        d_model=10, n_layer=2, vocab_size=13, moe_experts=4, moe_top_k=1, moe_every=every
    )
    params = random_params(config, 11)
    params["backbone.embeddings.weight"] *= 30  # logits of order 1-10
    model = CpuMamba(config, params)
    assert sorted(model.cortex) == ([0, 1] if every == 1 else [1])
    ids = np.random.default_rng(5).integers(0, config.vocab_size, (3, 9))
    parallel = model.forward(ids)  # (B, L, V)
    state = model.init_state(3)
    stepped = np.stack([model.step(ids[:, t], state)[0] for t in range(9)], axis=1)
    scale = np.abs(parallel).max()
    diff = np.abs(stepped - parallel).max()
    print(f"step vs forward: max abs diff {diff:.2e}, logit scale {scale:.2f}")
    assert scale > 1.0 and diff <= 1e-5 * scale
    logits, _ = model.prefill(ids, np.array([9, 4, 1]))
    expected = parallel[[0, 1, 2], [8, 3, 0]]
    assert np.abs(logits - expected).max() <= 1e-5 * scale


def test_cpu_backend_trains_the_cortex_and_reports_routing() -> None:
    config = MambaConfig(d_model=16, n_layer=2, vocab_size=19, moe_experts=4, moe_top_k=2)
    train = TrainConfig(steps=30, batch_size=2, seq_len=12, lr=1e-2, warmup_steps=0)
    backend = CpuBackend(config, init_params(config, 0), train)
    sequence = np.random.default_rng(2).integers(0, config.vocab_size, 13).astype(np.int32)
    batch = (array("i", sequence[:-1].tolist() * 2), array("i", sequence[1:].tolist() * 2))
    losses = [asyncio.run(backend.train_step([batch], 1e-2, step)) for step in range(1, 31)]
    print(f"cortex training: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]
    routing = backend.model.last_routing
    assert routing is not None and sorted(routing["layers"]) == ["0", "1"]
    for layer in routing["layers"].values():
        assert len(layer["fractions"]) == 4 and sum(layer["fractions"]) == pytest.approx(2.0)
    json.dumps(routing)  # JSON-able for the progress stream


def test_trainer_progress_carries_the_routing_and_the_cli_prints_it() -> None:
    config = MambaConfig(d_model=8, n_layer=2, vocab_size=13, moe_experts=3, moe_top_k=1)
    train = TrainConfig(steps=2, batch_size=2, seq_len=8, warmup_steps=0, eval_every=0)
    tokens = array("i", np.random.default_rng(0).integers(0, 13, 200).tolist())
    seen: list[Progress] = []
    backend = CpuBackend(config, init_params(config, 0), train)
    asyncio.run(Trainer(backend, tokens, tokens[:40], train, on_progress=seen.append).run())
    assert [p.step for p in seen] == [1, 2]
    routing = seen[-1].routing
    assert routing is not None and set(routing["layers"]) == {"0", "1"}
    text = routing_text(routing)
    print(text)
    assert text.startswith(f" aux {routing['aux_loss']:.3f} L0 ") and text.count("%") == 2
    plain = CpuBackend(MambaConfig(d_model=8, n_layer=2, vocab_size=13), init_params(
        MambaConfig(d_model=8, n_layer=2, vocab_size=13), 0), train)  # fmt: skip
    seen.clear()
    asyncio.run(Trainer(plain, tokens, tokens[:40], train, on_progress=seen.append).run())
    assert seen[-1].routing is None and routing_text(None) == ""


def test_without_the_cortex_the_model_is_the_plain_mamba_one() -> None:
    plain = MambaConfig(d_model=8, n_layer=3, vocab_size=17)
    off = MambaConfig(d_model=8, n_layer=3, vocab_size=17, moe_experts=0, moe_top_k=5)
    assert off == plain and off.to_hf_config() == plain.to_hf_config()
    assert plain.to_hf_config()["model_type"] == "mamba" and not plain.moe_layers
    assert not any("moe" in name for name in plain.param_shapes())
    a, b = init_params(plain, 3), init_params(off, 3)
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)


def test_cortex_config_roundtrips_and_says_no_transformers_class() -> None:
    hf = TINY.to_hf_config()
    assert hf["model_type"] == "evermind_mamba_moe" and hf["transformers_class"] is None
    assert hf["architectures"] == ["EvermindMambaMoeForCausalLM"] and not hf["norm_topk_prob"]
    assert MambaConfig.from_hf_config(json.loads(json.dumps(hf))) == TINY
    with pytest.raises(ConfigError, match="norm_topk_prob"):
        MambaConfig.from_hf_config({**hf, "norm_topk_prob": True})


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"moe_top_k": 5}, "moe_top_k"),
        ({"moe_every": 9}, "moe_every"),
        ({"moe_intermediate": -1}, "moe_intermediate"),
        ({"router_aux_loss_coef": -0.1}, "router_aux_loss_coef"),
        ({"block": "mamba2", "head_dim": 8}, "Mamba-1"),
    ],
)
def test_bad_cortex_configs_are_refused_naming_the_field(overrides: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MambaConfig(d_model=8, n_layer=2, vocab_size=11, moe_experts=4, **overrides)


def test_cli_trains_a_cortex_package_on_the_cpu_and_refuses_bad_values(tmp_path, capsys) -> None:
    import evermind
    from evermind.cli import main
    from tests.factories import TEXT

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "cortex.evermind"
    common = ["train", "--moe-experts", "3", "--corpus", str(corpus), "--vocab-size", "300"]
    assert main([*common, "--device", "cpu", "--moe-top-k", "4"]) == 2
    err = capsys.readouterr().err
    assert "moe_top_k" in err and "got 4" in err
    size = ["--steps", "3", "--batch-size", "2", "--seq-len", "16", "--out", str(out)]
    assert main([*common, "--device", "cpu", "--moe-top-k", "1", *size]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["steps"] == 3
    assert " aux " in captured.err and " L1 " in captured.err  # the routing on the progress line
    model = evermind.load(out)
    assert model.config.moe_experts == 3 and model.config.moe_top_k == 1


def test_the_gpu_layout_stacks_the_experts_and_the_pure_python_decoder_refuses() -> None:
    from evermind.model.gpu_layout import slot_specs
    from evermind.model.py_decode import PyDecoder

    specs = {spec.key: spec for spec in slot_specs(TINY)}
    shapes = TINY.param_shapes()
    # Every HF tensor's floats land in the slots' pieces, each float once.
    floats: dict[str, int] = {}
    for spec in specs.values():
        for name, _, _, count in spec.pieces():
            floats[name] = floats.get(name, 0) + count
    assert floats == {name: int(np.prod(shape)) for name, shape in shapes.items()}
    for i in TINY.moe_layers:
        stacked = specs[f"{i}.moe.gate_proj"]
        assert stacked.stacked == tuple(
            f"backbone.layers.{i}.moe.experts.{e}.gate_proj.weight" for e in range(TINY.moe_experts)
        )
    with pytest.raises(ConfigError, match="moe_experts=3"):
        PyDecoder(TINY, {})
