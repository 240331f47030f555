"""The GPU model with the cortex against the numpy CPU model: one step's loss (LM + coef ·
aux), every gradient and the routing statistics, then a training run whose losses track
``CpuBackend``'s, and evaluation."""

from __future__ import annotations

import asyncio
from array import array

import numpy as np
import pytest

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.gpu import GpuMamba
from evermind.model.init import init_params
from evermind.train.cpu_backend import CpuBackend
from evermind.train.gpu_backend import GpuBackend
from evermind.train.schedule import Schedule
from evermind.types import TrainConfig
from tests.factories import next_token_batch
from tests.numerics import assert_close
from tests.shaders.step_checks import assert_every_gradient, one_step, perturbed

# The cortex in both layers (moe_every 1): 5 experts (k = 2) of width 6, a shared expert of
# width 10, an aux coefficient large enough for its gradient to show in the router's.
CONFIG = MambaConfig(
    d_model=12,
    n_layer=2,
    vocab_size=29,
    d_state=4,
    d_conv=4,
    moe_experts=5,
    moe_top_k=2,
    moe_intermediate=6,
    moe_shared_intermediate=10,
    router_aux_loss_coef=0.1,
)
B, L = 2, 7


def _batch(seed: int) -> tuple[array, array]:
    return next_token_batch(CONFIG.vocab_size, B, L, seed)


def _assert_routing(got: dict, want: dict) -> None:
    assert set(got) == set(want) and set(got["layers"]) == set(want["layers"])
    assert got["aux_loss"] == pytest.approx(want["aux_loss"], rel=1e-5)
    assert got["lm_loss"] == pytest.approx(want["lm_loss"], rel=1e-5)
    for layer, stats in want["layers"].items():
        assert got["layers"][layer]["fractions"] == stats["fractions"], f"layer {layer}"
        assert got["layers"][layer]["aux_loss"] == pytest.approx(stats["aux_loss"], rel=1e-5)


@pytest.mark.parametrize("perturb", [False, True], ids=["init", "perturbed"])
def test_one_step_loss_gradients_and_routing_match_cpu(device, perturb: bool) -> None:
    params = init_params(CONFIG, seed=5)
    if perturb:  # spreads the router's probabilities: ranks far from ties
        params = perturbed(params, seed=6)
    pair = one_step(device, CONFIG, params, _batch(1), B, L, CpuMamba)
    print(f"routing {pair.gpu.routing}")
    assert pair.gpu.routing is not None and pair.cpu.last_routing is not None
    _assert_routing(pair.gpu.routing, pair.cpu.last_routing)
    assert_every_gradient(pair)


def test_training_steps_track_the_cpu_backend(device) -> None:
    """10 steps, two micro-batches each (the aux loss and its gradient scale with them)."""
    steps = 10
    params = perturbed(init_params(CONFIG, seed=2), seed=3)
    train = TrainConfig(
        steps=steps,
        batch_size=B,
        seq_len=L,
        lr=5e-3,
        warmup_steps=3,
        grad_clip=1.0,
        weight_decay=0.1,
        grad_accum=2,
    )
    gpu = GpuBackend(device, CONFIG, B, L, train)
    gpu.model.load_params(params)
    cpu = CpuBackend(CONFIG, params, train)
    schedule = Schedule.for_training(train)
    gpu_losses, cpu_losses = [], []
    for step in range(steps):
        batches = [_batch(100), _batch(101)]  # revisited: the loss must fall
        lr = schedule.lr(step)
        gpu_losses.append(asyncio.run(gpu.train_step(batches, lr, step + 1)))
        cpu_losses.append(asyncio.run(cpu.train_step(batches, lr, step + 1)))
    print("gpu", [round(x, 4) for x in gpu_losses])
    print("cpu", [round(x, 4) for x in cpu_losses])
    assert_close(np.array(gpu_losses), np.array(cpu_losses), atol=2e-3, rtol=2e-3, name="losses")
    assert gpu_losses[-1] < gpu_losses[0]
    assert gpu.routing is not None and cpu.routing is not None
    assert gpu.routing["layers"].keys() == cpu.routing["layers"].keys()
    final = asyncio.run(gpu.model.read_params())
    for name, ref in cpu.model.params.items():
        got = np.frombuffer(final[name], np.float32).reshape(ref.shape)
        assert_close(got, ref, atol=2e-3, rtol=2e-3, name=f"param {name} after {steps} steps")


def test_eval_matches_cpu_forward(device) -> None:
    params = perturbed(init_params(CONFIG, seed=4), seed=8)
    gpu = GpuMamba(device, CONFIG, B, L)
    gpu.load_params(params)
    batch = _batch(9)
    loss_sum, count = asyncio.run(gpu.eval_batch(batch))
    cpu = CpuBackend(CONFIG, params, TrainConfig(batch_size=B, seq_len=L))
    ref_sum, ref_count = asyncio.run(cpu.eval_batch(batch))
    assert count == ref_count == B * L
    assert loss_sum == pytest.approx(ref_sum, rel=1e-5)
    round_trip = asyncio.run(gpu.read_params())
    for name, values in params.items():
        assert round_trip[name].tobytes() == values.tobytes(), name


def test_recurrent_decoding_matches_the_cpu_forward(device) -> None:
    """GpuDecoder (one token) and GpuBatchDecoder (two slots) with the cortex per token."""
    from evermind.model.gpu_decode import GpuBatchDecoder
    from evermind.model.gpu_infer import GpuDecoder

    params = perturbed(init_params(CONFIG, seed=12), seed=13)
    model = GpuMamba(device, CONFIG, 1, 4)
    model.load_params(params)
    cpu = CpuMamba(CONFIG, params)
    prompts = [[3, 17, 0, 28, 5, 5, 9], [21, 1, 2, 8, 8, 14, 6]]
    parallel = cpu.forward(np.array(prompts))  # (2, L, V)
    decoder = GpuDecoder(device, CONFIG, model.slots)
    decoder.reset()
    for t, token in enumerate(prompts[0]):
        got = np.array(asyncio.run(decoder.step(token)), np.float32)
        assert_close(got, parallel[0, t], atol=1e-4, rtol=1e-4, name=f"decode t={t}")
    batch = GpuBatchDecoder(device, CONFIG, model.slots, slots=3)
    last = batch.prefill([2, 0], [p[:-1] for p in prompts])
    assert_close(last, parallel[:, -2], atol=1e-4, rtol=1e-4, name="batch prefill")
    step = batch.step([2, 0], [p[-1] for p in prompts])
    assert_close(step, parallel[:, -1], atol=1e-4, rtol=1e-4, name="batch step")


def test_cli_trains_a_cortex_package_on_the_gpu(tmp_path, capsys) -> None:
    """``evermind train --device gpu --moe-experts 3``: GpuMamba trains the cortex, the progress
    line shows the routing, and the package loads with it."""
    import json

    import evermind
    from evermind.cli import main
    from tests.factories import TEXT

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "cortex.evermind"
    args = ["train", "--moe-experts", "3", "--moe-top-k", "1", "--device", "gpu"]
    args += ["--corpus", str(corpus), "--vocab-size", "300", "--steps", "3"]
    assert main([*args, "--batch-size", "2", "--seq-len", "16", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["steps"] == 3
    assert " aux " in captured.err and " L1 " in captured.err  # the routing on the progress line
    model = evermind.load(out)
    assert model.config.moe_experts == 3 and model.config.moe_top_k == 1


def test_embeddings_match_cpu_embed(device) -> None:
    """GpuEmbedder replays the forward, the cortex included: the pooled vectors equal the CPU's."""
    from evermind.model.gpu_infer import GpuEmbedder

    params = perturbed(init_params(CONFIG, seed=14), seed=15)
    model = GpuMamba(device, CONFIG, 1, 4)
    model.load_params(params)
    embedder = GpuEmbedder(device, CONFIG, model.slots, batch_size=2, max_tokens=7)
    texts = [[1, 2, 3], [5], [7, 8, 9, 10, 11, 12, 13]]
    got = np.array(asyncio.run(embedder.embed_ids(texts)), np.float32)
    cpu = CpuMamba(CONFIG, params)
    for row, ids in enumerate(texts):
        ref = cpu.embed(np.array([ids]), np.ones((1, len(ids)), bool))[0]
        assert_close(got[row], ref, atol=1e-5, rtol=1e-4, name=f"embedding {row}")
