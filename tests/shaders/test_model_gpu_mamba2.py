"""The GPU Mamba-2 (SSD) model against the numpy CPU model: one step's loss and every gradient,
then a training run whose losses track ``CpuBackend``'s, and evaluation."""

from __future__ import annotations

import asyncio
from array import array

import numpy as np
import pytest

from evermind.model.config import MambaConfig
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.model.gpu import GpuMamba
from evermind.model.init import init_params
from evermind.train.cpu_backend import CpuBackend
from evermind.train.gpu_backend import GpuBackend
from evermind.train.schedule import Schedule
from evermind.types import TrainConfig
from tests.factories import next_token_batch
from tests.numerics import assert_close
from tests.shaders.step_checks import assert_every_gradient, one_step, perturbed

# Awkward on purpose: 4 heads of 10 channels in 2 groups, and L = 9 is not a multiple of the
# chunk (4), so the scan passes states across three chunks, the last one short.
CONFIG = MambaConfig(
    d_model=20,
    n_layer=2,
    vocab_size=37,
    d_state=5,
    d_conv=4,
    block="mamba2",
    head_dim=10,
    n_groups=2,
    chunk_size=4,
)
B, L = 2, 9


def _batch(seed: int) -> tuple[array, array]:
    return next_token_batch(CONFIG.vocab_size, B, L, seed)


@pytest.mark.parametrize("perturb", [False, True], ids=["init", "perturbed"])
def test_one_step_loss_and_every_gradient_match_cpu(device, perturb: bool) -> None:
    params = init_params(CONFIG, seed=5)
    if perturb:  # at init the scan's gradients (A_log, dt_bias) are ~1e-10
        params = perturbed(params, seed=6)
    assert_every_gradient(one_step(device, CONFIG, params, _batch(1), B, L, CpuMamba2))


def test_training_steps_track_the_cpu_backend(device) -> None:
    steps = 12
    params = init_params(CONFIG, seed=2)
    train = TrainConfig(
        steps=steps,
        batch_size=B,
        seq_len=L,
        lr=5e-3,
        warmup_steps=3,
        grad_clip=1.0,
        weight_decay=0.1,
    )
    gpu = GpuBackend(device, CONFIG, B, L, train)
    gpu.model.load_params(params)
    cpu = CpuBackend(CONFIG, params, train)
    schedule = Schedule.for_training(train)
    gpu_losses, cpu_losses = [], []
    for step in range(steps):
        batch = _batch(100 + step % 2)  # two batches, revisited: the loss must fall
        lr = schedule.lr(step)
        gpu_losses.append(asyncio.run(gpu.train_step([batch], lr, step + 1)))
        cpu_losses.append(asyncio.run(cpu.train_step([batch], lr, step + 1)))
    print("gpu", [round(x, 4) for x in gpu_losses])
    print("cpu", [round(x, 4) for x in cpu_losses])
    assert_close(np.array(gpu_losses), np.array(cpu_losses), atol=2e-3, rtol=2e-3, name="losses")
    assert gpu_losses[-1] < gpu_losses[0]
    final = asyncio.run(gpu.model.read_params())
    for name, ref in cpu.model.params.items():
        got = np.frombuffer(final[name], np.float32).reshape(ref.shape)
        assert_close(got, ref, atol=2e-3, rtol=2e-3, name=f"param {name} after {steps} steps")


def test_eval_matches_cpu_forward(device) -> None:
    params = init_params(CONFIG, seed=4)
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


def test_cli_trains_a_mamba2_package_on_the_gpu(tmp_path, capsys) -> None:
    """``evermind train --device gpu --block mamba2``: the job trains GpuMamba and packages it."""
    import json

    import evermind
    from evermind.cli import main
    from tests.factories import TEXT

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "m2.evermind"
    args = ["train", "--block", "mamba2", "--device", "gpu", "--corpus", str(corpus)]
    args += ["--vocab-size", "300", "--steps", "3", "--batch-size", "2", "--seq-len", "16"]
    assert main([*args, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "wgpu gpu" in captured.err or "device:" in captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["steps"] == 3 and np.isfinite(summary["final_loss"])
    model = evermind.load(out)
    assert model.config.block == "mamba2" and isinstance(model.cpu, CpuMamba2)


def test_gpu_embeddings_and_decoding_match_cpu(device) -> None:
    """GpuEmbedder replays GpuMamba's forward and GpuDecoder the Mamba-2 recurrent step: both
    agree with CpuMamba2 (embed; step's logits token by token)."""
    from evermind.model.gpu_infer import GpuDecoder, GpuEmbedder

    params = perturbed(init_params(CONFIG, seed=7), seed=8)
    model = GpuMamba(device, CONFIG, 1, L)
    model.load_params(params)
    embedder = GpuEmbedder(device, CONFIG, model.slots, batch_size=3, max_tokens=L)
    texts = [[1, 2, 3], [5], [7, 8, 9, 10, 11, 12, 13, 14, 15], [20, 21]]
    got = np.array(asyncio.run(embedder.embed_ids(texts)), np.float32)
    cpu = CpuMamba2(CONFIG, params)
    for row, ids in enumerate(texts):
        ref = cpu.embed(np.array([ids]), np.ones((1, len(ids)), bool))[0]
        assert_close(got[row], ref, atol=1e-5, rtol=1e-4, name=f"embedding {row}")

    decoder = GpuDecoder(device, CONFIG, model.slots)
    tokens = [3, 17, 0, 36, 5, 5, 21]
    for run in range(2):  # reset() must zero every conv register and SSD state
        decoder.reset()
        state = cpu.init_state(1)
        for t, token in enumerate(tokens):
            got_logits = np.frombuffer(asyncio.run(decoder.step(token)), np.float32)
            want, state = cpu.step(np.array([token]), state)
            assert_close(got_logits, want[0], atol=1e-4, rtol=1e-4, name=f"logits {run}.{t}")


def test_batched_gpu_decoding_matches_cpu_row_for_row(device) -> None:
    """GpuBatchDecoder (the runtime's GPU serving) with mixed prompt lengths on scattered
    slots, then steps, then a reused slot: every row equals CpuMamba2's step alone."""
    from evermind.model.gpu_decode import GpuBatchDecoder

    params = perturbed(init_params(CONFIG, seed=12), seed=13)
    decoder = GpuBatchDecoder.from_params(device, CONFIG, params, slots=5)
    cpu = CpuMamba2(CONFIG, params)

    def alone(tokens: list[int]) -> np.ndarray:
        state, rows = cpu.init_state(1), []
        for token in tokens:
            logits, state = cpu.step(np.array([token]), state)
            rows.append(logits[0])
        return np.stack(rows)

    slots, prompts = [3, 0, 4], [[5, 9], [1, 2, 3, 4, 5, 6, 7], [36]]
    follow = [[8, 0, 2], [11, 11, 30], [7, 6, 5]]
    want = [alone(p + f) for p, f in zip(prompts, follow, strict=True)]
    got = decoder.prefill(slots, prompts)
    for row, prompt in enumerate(prompts):
        assert_close(got[row], want[row][len(prompt) - 1], atol=1e-4, rtol=1e-4, name="prefill")
    for t in range(3):
        got = decoder.step(slots, [f[t] for f in follow])
        for row, prompt in enumerate(prompts):
            assert_close(got[row], want[row][len(prompt) + t], atol=1e-4, rtol=1e-4, name="step")
    decoder.release(0)
    again = decoder.prefill([0], [[4, 8, 15]])  # a fresh sequence in a used slot
    assert_close(again[0], alone([4, 8, 15])[-1], atol=1e-4, rtol=1e-4, name="reused slot")


def test_one_embedding_step_loss_and_every_gradient_match_numpy(device) -> None:
    """The embedding objective enters the same Mamba-2 backward at the final norm."""
    from evermind.ops.embed_loss import embed_loss_bwd, embed_loss_fwd
    from evermind.ops.pool import pool_bwd, pool_fwd

    embed_dim, lengths = 7, [L, 4, 1]
    b = len(lengths)
    params = perturbed(init_params(CONFIG, seed=9), seed=10)
    rng = np.random.default_rng(0)
    centre = (rng.standard_normal(CONFIG.d_model) * 0.1).astype(np.float32)
    head = (rng.standard_normal((embed_dim, CONFIG.d_model)) * 0.3).astype(np.float32)
    ids = rng.integers(0, CONFIG.vocab_size, size=(b, L)).astype(np.int32)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0  # padding id
    targets = rng.standard_normal((b, embed_dim)).astype(np.float32)

    gpu = GpuBackend(
        device, CONFIG, b, L, TrainConfig(batch_size=b, seq_len=L, grad_clip=0.0), embed_dim=7
    )
    gpu.model.load_params(params)
    gpu.load_embedder(array("f", centre), array("f", head.ravel()))
    batch = (array("i", ids.ravel().tolist()), array("I", lengths), array("f", targets.ravel()))
    gpu.embed_zero_plan.run()
    loss = asyncio.run(gpu.embed_forward_backward(batch))
    grads = asyncio.run(gpu.model.read_grads())

    cpu = CpuMamba2(CONFIG, params)
    hidden, cache = cpu.hidden_train(ids)
    n_valid = np.array(lengths, np.int64)
    pooled = pool_fwd(hidden.astype(np.float64), n_valid)
    ref_loss = embed_loss_fwd(pooled, centre, head, targets.astype(np.float64))
    dpooled, _ = embed_loss_bwd(pooled, centre, head, targets.astype(np.float64))
    ref_grads = cpu.backward_hidden(cache, pool_bwd(hidden.astype(np.float64), n_valid, dpooled))
    print(f"embedding loss gpu {loss:.6f} numpy {ref_loss:.6f}")
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for name, ref in ref_grads.items():
        got = np.frombuffer(grads[name], np.float32).reshape(ref.shape)
        scale = float(np.abs(ref).max()) or 1.0
        assert_close(got, ref, atol=2e-4 * scale, rtol=2e-3, name=f"embedding grad {name}")
