"""CpuMamba2, the numpy Mamba-2 (SSD) model: the whole-model gradient matches finite
differences, CPU training lowers the loss, the forward is causal, and recurrent decoding
(step, ragged prefill) equals the parallel forward."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.model.config import MambaConfig
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.model.gpu_layout import slot_specs
from evermind.model.init import init_params
from evermind.ops.cross_entropy import mean_loss
from tests.factories import TEXT, run_sync, tiny_config, tiny_package, tiny_tokenizer
from tests.numerics import assert_close, finite_difference

# 4 heads of 3 channels in 2 groups; chunks of 2 over L = 5 (a partial last chunk).
TINY = MambaConfig(
    d_model=6, n_layer=2, vocab_size=11, d_state=3, block="mamba2", head_dim=3, n_groups=2,
    chunk_size=2,
)  # fmt: skip
GRAD_RTOL = 1e-6


def _noisy_params(config: MambaConfig, seed: int) -> dict[str, np.ndarray]:
    """Init plus noise, so norms, D and biases are off their special values; dt_bias near 0
    (dt ~ softplus(0) = 0.7) so the decay exp(dt A) matters for the A_log and dt gradients."""
    rng = np.random.default_rng(seed)
    shapes = config.param_shapes()
    params = {}
    for name, flat in init_params(config, seed).items():
        value = np.array(flat, dtype=np.float64).reshape(shapes[name])
        if name.endswith("dt_bias"):
            value = np.zeros_like(value)
        params[name] = value + 0.1 * rng.standard_normal(value.shape)
    return params


def test_whole_model_gradient_matches_finite_differences() -> None:
    model = CpuMamba2(TINY, _noisy_params(TINY, 7), dtype=np.float64)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, TINY.vocab_size, (2, 5))
    ids[1, 3] = ids[0, 1]  # a repeated id: the embedding gather must accumulate
    targets = rng.integers(0, TINY.vocab_size, (2, 5))
    targets[0, 2] = -100
    loss, grads = model.loss_and_grads(ids, targets)
    assert list(grads) == list(TINY.param_shapes())
    assert loss == pytest.approx(
        mean_loss(model.forward(ids).reshape(-1, TINY.vocab_size), targets.reshape(-1)), rel=1e-12
    )
    errors = {}
    for name, param in model.params.items():

        def forward_loss(value: np.ndarray, param: np.ndarray = param) -> float:
            param[...] = value
            logits = model.forward(ids).reshape(-1, TINY.vocab_size)
            return mean_loss(logits, targets.reshape(-1))

        saved = param.copy()
        numeric = finite_difference(forward_loss, saved)
        param[...] = saved
        scale = max(float(np.linalg.norm(grads[name])), float(np.linalg.norm(numeric)), 1e-12)
        errors[name] = float(np.linalg.norm(grads[name] - numeric)) / scale
        assert np.linalg.norm(numeric) > 0, f"{name}: numeric gradient is all zero"
    for name, err in errors.items():
        print(f"mamba2 d[{name}]: rel err {err:.2e} (|grad| {np.linalg.norm(grads[name]):.2e})")
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] < GRAD_RTOL, f"{worst}: rel err {errors[worst]:.2e} >= {GRAD_RTOL}"


def test_cpu_training_lowers_the_loss() -> None:
    from evermind.job import JobConfig, split, tokenize
    from evermind.train.cpu_backend import CpuBackend
    from evermind.train.loop import TrainConfig, Trainer

    tok = tiny_tokenizer()
    config = tiny_config(tok, block="mamba2")
    train = TrainConfig(
        steps=12, batch_size=2, seq_len=16, lr=1e-2, warmup_steps=2, eval_every=0, seed=0
    )
    backend = CpuBackend(config, init_params(config, 0), train)
    assert isinstance(backend.model, CpuMamba2)
    train_ids, held = split(JobConfig(name="m2", train=train), tokenize(tok, TEXT))
    result = run_sync(Trainer(backend, train_ids, held, train).run())
    print(f"mamba2 CPU training: loss {result.initial_loss:.3f} -> {result.final_loss:.3f}")
    assert result.final_loss < result.initial_loss - 0.3


def test_forward_is_causal_and_float32_matches_float64() -> None:
    params = _noisy_params(TINY, 4)
    model = CpuMamba2(TINY, params)
    ids = np.array([[1, 2, 3, 4, 5, 6, 7]])
    changed = ids.copy()
    changed[0, 4] = 9
    a, b = model.forward(ids), model.forward(changed)
    np.testing.assert_array_equal(a[:, :4], b[:, :4])
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-4
    assert a.dtype == np.float32
    exact = CpuMamba2(TINY, params, dtype=np.float64).forward(ids)
    np.testing.assert_allclose(a, exact, atol=1e-5, rtol=1e-5)


def test_step_by_step_decoding_equals_the_parallel_forward() -> None:
    model = CpuMamba2(TINY, _noisy_params(TINY, 5), dtype=np.float64)
    ids = np.random.default_rng(1).integers(0, TINY.vocab_size, (2, 7))
    parallel = model.forward(ids)  # (B, L, V), chunks of 2 over 7 steps
    state = model.init_state(2)
    stepped = np.stack([model.step(ids[:, t], state)[0] for t in range(7)], axis=1)
    assert_close(stepped, parallel, atol=1e-11, rtol=1e-10, name="step vs forward")


def test_prefill_of_ragged_rows_then_steps_equals_each_rows_forward() -> None:
    model = CpuMamba2(TINY, _noisy_params(TINY, 6), dtype=np.float64)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, TINY.vocab_size, (2, 6))
    lengths = np.array([6, 3])  # row 1 is padded after 3 tokens (shorter than the conv's K)
    logits, state = model.prefill(ids, lengths)
    following = rng.integers(0, TINY.vocab_size, (2, 2))
    after = [model.step(following[:, t], state)[0] for t in range(2)]
    for row, length in enumerate(lengths):
        whole = np.concatenate([ids[row, :length], following[row]])[None]
        expected = model.forward(whole)[0]  # (length + 2, V)
        assert_close(logits[row], expected[length - 1], atol=1e-11, rtol=1e-10, name="prefill")
        for t in range(2):
            assert_close(after[t][row], expected[length + t], atol=1e-11, rtol=1e-10)


def test_float32_step_and_generation_from_a_package() -> None:
    import evermind

    model = evermind.load(tiny_package("gen2", block="mamba2"))
    assert isinstance(model.cpu, CpuMamba2)
    ids = np.array([model.tokenizer.encode("The quick brown fox")])
    state = model.cpu.init_state(1)
    stepped = [model.cpu.step(ids[:, t], state)[0] for t in range(ids.shape[1])]
    assert_close(stepped[-1], model.cpu.forward(ids)[:, -1], atol=1e-5, rtol=1e-5, name="f32")
    first = model.complete("The quick", max_new_tokens=6, temperature=0.0)
    assert first.completion_tokens >= 1
    assert model.complete("The quick", max_new_tokens=6, temperature=0.0).text == first.text


def test_the_runtimes_batched_cpu_decoder_serves_a_mamba2_package() -> None:
    import evermind
    from evermind.model.cpu_decode import CpuDecoder

    model = evermind.load(tiny_package("gen2", block="mamba2"))
    decoder = CpuDecoder(model, slots=4)
    prompts = [list(range(1, 30)), [5, 6, 7], list(range(40, 60))]  # the scan and the steps
    logits = decoder.prefill([2, 0, 3], prompts)
    after = decoder.step([2, 0, 3], [9, 9, 9])
    for row, prompt in enumerate(prompts):
        expected = model.cpu.forward(np.array([[*prompt, 9]]))[0]
        assert_close(logits[row], expected[-2], atol=1e-5, rtol=1e-5, name="prefill")
        assert_close(after[row], expected[-1], atol=1e-5, rtol=1e-5, name="step")


def test_wrong_config_and_bad_state_say_what_is_wrong() -> None:
    mamba1 = MambaConfig(d_model=6, n_layer=1, vocab_size=11, d_state=3)
    with pytest.raises(ConfigError, match="block='mamba2'"):
        CpuMamba2(mamba1, init_params(mamba1, 0))
    model = CpuMamba2(TINY, init_params(TINY, 0))
    with pytest.raises(ShapeError, match="state holds 2 layers x batch 1"):
        model.step(np.array([1, 2]), model.init_state(1))
    with pytest.raises(ShapeError, match="one length in"):
        model.prefill(np.array([[1, 2]]), np.array([3]))


def test_config_checks_heads_and_groups() -> None:
    with pytest.raises(ConfigError, match="head_dim: expected a divisor of d_inner"):
        MambaConfig(d_model=6, n_layer=1, vocab_size=11, block="mamba2", head_dim=5)
    with pytest.raises(ConfigError, match="n_groups: expected a divisor of the 4 heads"):
        MambaConfig(d_model=6, n_layer=1, vocab_size=11, block="mamba2", head_dim=3, n_groups=3)
    with pytest.raises(ConfigError, match="block: expected one of"):
        MambaConfig(d_model=6, n_layer=1, vocab_size=11, block="mamba3")
    nano = MambaConfig.preset("nano", 300, block="mamba2")
    assert (nano.n_heads, nano.head_dim, nano.conv_dim) == (4, 64, 288)
    assert nano.no_decay("backbone.layers.0.mixer.dt_bias")
    assert nano.no_decay("backbone.layers.0.mixer.norm.weight")
    assert not nano.no_decay("backbone.layers.0.mixer.in_proj.weight")
    # The GPU layout splits in_proj and the conv into row blocks that tile each tensor.
    covered: dict[str, int] = {}
    for spec in slot_specs(nano):
        assert spec.offset == covered.get(spec.hf_name, 0), spec.key
        covered[spec.hf_name] = spec.offset + spec.count
    assert covered == {name: int(np.prod(shape)) for name, shape in nano.param_shapes().items()}
    from evermind.model.py_decode import PyDecoder

    with pytest.raises(ConfigError, match="PyDecoder: decodes Mamba-1 blocks only"):
        PyDecoder(nano, {})


def test_cli_trains_a_mamba2_package_on_the_cpu(tmp_path, capsys) -> None:
    import json

    import evermind
    from evermind.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "m2.evermind"
    common = ["train", "--block", "mamba2", "--corpus", str(corpus), "--vocab-size", "300"]
    size = ["--steps", "4", "--batch-size", "2", "--seq-len", "16", "--out", str(out)]
    assert main([*common, "--device", "cpu", *size]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 4
    model = evermind.load(out)
    assert model.config.block == "mamba2" and isinstance(model.cpu, CpuMamba2)
