"""The GPU model against the numpy CPU model: one step's loss and every gradient, then a
20-step training run of the GPU backend whose losses track the CPU backend's, its state
handed between the two, evaluation, and the embedding objective."""

from __future__ import annotations

import asyncio
import random
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
from tests.numerics import assert_close
from tests.shaders.step_checks import assert_every_gradient, one_step

# Awkward on purpose: nothing is a multiple of a workgroup size.
CONFIG = MambaConfig(d_model=20, n_layer=2, vocab_size=37, d_state=5, d_conv=4)
B, L = 2, 9


def _batch(seed: int) -> tuple[array, array]:
    rng = random.Random(seed)
    tokens = [rng.randrange(CONFIG.vocab_size) for _ in range(B * (L + 1))]
    inputs, targets = array("i"), array("i")
    for row in range(B):
        window = tokens[row * (L + 1) : (row + 1) * (L + 1)]
        inputs.extend(window[:-1])
        targets.extend(window[1:])
    return inputs, targets


def test_one_step_loss_and_every_gradient_match_cpu(device) -> None:
    params = init_params(CONFIG, seed=5)
    assert_every_gradient(one_step(device, CONFIG, params, _batch(1), B, L, CpuMamba))


def test_twenty_training_steps_track_the_cpu_backend(device) -> None:
    params = init_params(CONFIG, seed=2)
    train = TrainConfig(
        steps=20, batch_size=B, seq_len=L, lr=5e-3, warmup_steps=3, grad_clip=1.0, weight_decay=0.1
    )
    gpu = GpuBackend(device, CONFIG, B, L, train)
    gpu.model.load_params(params)
    cpu = CpuBackend(CONFIG, params, train)
    schedule = Schedule.for_training(train)
    gpu_losses, cpu_losses = [], []
    for step in range(20):
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
        assert_close(got, ref, atol=2e-3, rtol=2e-3, name=f"param {name} after 20 steps")


def test_gradient_accumulation_equals_one_big_batch(device) -> None:
    params = init_params(CONFIG, seed=3)
    a, b = _batch(7), _batch(8)
    accum = GpuMamba(
        device, CONFIG, B, L, TrainConfig(batch_size=B, seq_len=L, grad_accum=2, grad_clip=0)
    )
    accum.load_params(params)
    accum.zero_plan.run()
    loss = asyncio.run(accum.forward_backward(a)) + asyncio.run(accum.forward_backward(b))
    got = asyncio.run(accum.read_grads())

    cpu = CpuMamba(CONFIG, params)
    ids = np.concatenate([np.frombuffer(x[0], np.int32) for x in (a, b)]).reshape(2 * B, L)
    tg = np.concatenate([np.frombuffer(x[1], np.int32) for x in (a, b)]).reshape(2 * B, L)
    ref_loss, ref = cpu.loss_and_grads(ids, tg)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for name in ("backbone.embeddings.weight", "backbone.layers.1.mixer.A_log"):
        scale = float(np.abs(ref[name]).max())
        assert_close(
            np.frombuffer(got[name], np.float32).reshape(ref[name].shape),
            ref[name],
            atol=2e-4 * scale,
            rtol=2e-3,
            name=f"accumulated grad {name}",
        )


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


def test_gpu_training_memorises_a_tiny_text(device) -> None:
    """Overfit: a 40-token sequence is learned to near-zero loss."""
    rng = random.Random(1)
    seq = [rng.randrange(CONFIG.vocab_size) for _ in range(41)]
    batch = (array("i", seq[:-1]), array("i", seq[1:]))
    train = TrainConfig(batch_size=1, seq_len=40, lr=2e-2, weight_decay=0.0, grad_clip=1.0)
    gpu = GpuBackend(device, CONFIG, 1, 40, train)
    gpu.model.load_params(init_params(CONFIG, seed=0))
    losses = [asyncio.run(gpu.train_step([batch], 2e-2, step)) for step in range(1, 121)]
    print(f"overfit: {losses[0]:.3f} -> {losses[-1]:.4f}")
    assert losses[-1] < 0.1


def test_backend_state_is_handed_cpu_to_gpu_to_cpu(device) -> None:
    """Either backend resumes the other's checkpoint state (weights and AdamW moments under
    the same keys): CPU two steps -> GPU one step -> CPU, each next step equal."""
    params = init_params(CONFIG, seed=11)
    train = TrainConfig(batch_size=B, seq_len=L, lr=5e-3, grad_clip=1.0, weight_decay=0.1)
    cpu = CpuBackend(CONFIG, params, train)
    for step in (1, 2):
        asyncio.run(cpu.train_step([_batch(20 + step)], 5e-3, step))
    gpu = GpuBackend(device, CONFIG, B, L, train)
    asyncio.run(gpu.load_state(asyncio.run(cpu.state())))
    handed = asyncio.run(gpu.state())
    assert handed.keys() == asyncio.run(cpu.state()).keys()
    for name, values in asyncio.run(cpu.state()).items():
        assert handed[name].tobytes() == values.tobytes(), f"{name} changed on the way"
    want = asyncio.run(cpu.train_step([_batch(23)], 5e-3, 3))
    got = asyncio.run(gpu.train_step([_batch(23)], 5e-3, 3))
    print(f"step 3: gpu {got:.6f} cpu {want:.6f}")
    assert got == pytest.approx(want, rel=1e-5)
    back = CpuBackend(CONFIG, params, train)
    asyncio.run(back.load_state(asyncio.run(gpu.state())))
    after = asyncio.run(back.state())
    for name, ref in asyncio.run(cpu.state()).items():
        assert_close(
            np.frombuffer(after[name], np.float32),
            np.frombuffer(ref, np.float32),
            atol=2e-4,
            rtol=2e-3,
            name=f"{name} after the GPU step",
        )
    want = asyncio.run(cpu.train_step([_batch(24)], 5e-3, 4))
    assert asyncio.run(back.train_step([_batch(24)], 5e-3, 4)) == pytest.approx(want, rel=1e-4)


# The embedding objective: texts padded on the right, an awkward head width E.
EMBED_DIM = 7
LENGTHS = [L, 4, 1]


def _embed_batch(seed: int) -> tuple[array, array, array]:
    rng = np.random.default_rng(seed)
    b = len(LENGTHS)
    ids = rng.integers(0, CONFIG.vocab_size, size=(b, L)).astype(np.int32)
    for row, n in enumerate(LENGTHS):
        ids[row, n:] = 0  # padding id
    targets = rng.standard_normal((b, EMBED_DIM)).astype(np.float32)
    return array("i", ids.ravel().tolist()), array("I", LENGTHS), array("f", targets.ravel())


def _embed_reference(params, centre, head, batch) -> tuple[float, dict, np.ndarray]:
    from evermind.ops.embed_loss import embed_loss_bwd, embed_loss_fwd
    from evermind.ops.pool import pool_bwd, pool_fwd

    ids_a, lengths_a, targets_a = batch
    b = len(lengths_a)
    ids = np.frombuffer(ids_a, np.int32).reshape(b, L)
    lengths = np.frombuffer(lengths_a, np.uint32).astype(np.int64)
    targets = np.frombuffer(targets_a, np.float32).reshape(b, EMBED_DIM).astype(np.float64)
    cpu = CpuMamba(CONFIG, params)
    hidden, cache = cpu.hidden_train(ids)
    pooled = pool_fwd(hidden.astype(np.float64), lengths)
    loss = embed_loss_fwd(pooled, centre, head, targets)
    dpooled, dhead = embed_loss_bwd(pooled, centre, head, targets)
    grads = cpu.backward_hidden(cache, pool_bwd(hidden.astype(np.float64), lengths, dpooled))
    return loss, grads, dhead


def test_one_embedding_step_loss_and_every_gradient_match_numpy(device) -> None:
    params = init_params(CONFIG, seed=6)
    b = len(LENGTHS)
    rng = np.random.default_rng(0)
    centre = (rng.standard_normal(CONFIG.d_model) * 0.1).astype(np.float32)
    head = (rng.standard_normal((EMBED_DIM, CONFIG.d_model)) * 0.3).astype(np.float32)
    train = TrainConfig(batch_size=b, seq_len=L, grad_clip=0.0)
    gpu = GpuBackend(device, CONFIG, b, L, train, embed_dim=EMBED_DIM)
    gpu.model.load_params(params)
    gpu.load_embedder(array("f", centre), array("f", head.ravel()))
    batch = _embed_batch(3)
    gpu.embed_zero_plan.run()
    loss = asyncio.run(gpu.embed_forward_backward(batch))
    grads = asyncio.run(gpu.model.read_grads())
    dhead = np.frombuffer(asyncio.run(gpu.read_embed_head_grad()), np.float32)

    ref_loss, ref_grads, ref_dhead = _embed_reference(params, centre, head, batch)
    print(f"embedding loss gpu {loss:.6f} numpy {ref_loss:.6f}")
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for name, ref, got in [
        *(
            (n, r, np.frombuffer(grads[n], np.float32).reshape(r.shape))
            for n, r in ref_grads.items()
        ),
        ("embedder.head.weight", ref_dhead, dhead.reshape(ref_dhead.shape)),
    ]:
        scale = float(np.abs(ref).max()) or 1.0
        # As the LM step: fp32 with different summation orders, relative to the largest.
        assert_close(got, ref, atol=2e-4 * scale, rtol=2e-3, name=f"embedding grad {name}")


def test_embedding_steps_reduce_the_loss(device) -> None:
    b = len(LENGTHS)
    train = TrainConfig(batch_size=b, seq_len=L, lr=1e-2, grad_clip=1.0, weight_decay=0.1)
    gpu = GpuBackend(device, CONFIG, b, L, train, embed_dim=EMBED_DIM)
    gpu.model.load_params(init_params(CONFIG, seed=7))
    batch = _embed_batch(4)
    losses = [asyncio.run(gpu.embed_train_step([batch], 1e-2, step)) for step in range(1, 16)]
    print("embedding losses", [round(x, 4) for x in losses])
    assert losses[-1] < 0.5 * losses[0]
    centre, head = asyncio.run(gpu.read_embedder())
    assert not any(centre), "the centring vector is fixed"
    assert np.isfinite(np.frombuffer(head, np.float32)).all()
    # The LM step recorded beside it still works on the shared weights.
    ids = batch[0]
    assert np.isfinite(asyncio.run(gpu.train_step([(ids, ids)], 1e-3, 16)))


def test_embedding_gradient_accumulation_equals_one_big_batch(device) -> None:
    params = init_params(CONFIG, seed=8)
    b = len(LENGTHS)
    train = TrainConfig(batch_size=b, seq_len=L, grad_accum=2, grad_clip=0.0)
    gpu = GpuBackend(device, CONFIG, b, L, train, embed_dim=EMBED_DIM)
    gpu.model.load_params(params)
    head = np.eye(EMBED_DIM, CONFIG.d_model)  # the default head
    one, two = _embed_batch(5), _embed_batch(6)
    gpu.embed_zero_plan.run()
    loss = asyncio.run(gpu.embed_forward_backward(one)) + asyncio.run(
        gpu.embed_forward_backward(two)
    )
    got = asyncio.run(gpu.model.read_grads())
    both = tuple(x + y for x, y in zip(one, two, strict=True))
    ref_loss, ref_grads, _ = _embed_reference(params, np.zeros(CONFIG.d_model), head, both)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for name in ("backbone.embeddings.weight", "backbone.layers.0.mixer.in_proj.weight"):
        ref = ref_grads[name]
        assert_close(
            np.frombuffer(got[name], np.float32).reshape(ref.shape),
            ref,
            atol=2e-4 * float(np.abs(ref).max()),
            rtol=2e-3,
            name=f"accumulated embedding grad {name}",
        )


def test_embedding_step_needs_an_embed_dim(device) -> None:
    from evermind.errors import ShapeError

    train = TrainConfig(batch_size=1, seq_len=4)
    with pytest.raises(ShapeError, match="embed_dim must be >= 1, got 0"):
        GpuBackend(device, CONFIG, 1, 4, train, embed_dim=0)
    with pytest.raises(ShapeError, match="no embedding step"):
        GpuBackend(device, CONFIG, 1, 4, train).load_embedder(array("f", [0.0] * CONFIG.d_model))
