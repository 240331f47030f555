"""The training loop on the numpy backend: loss falls, resume is bit-for-bit, schedule shape."""

from __future__ import annotations

import asyncio
import itertools
import random
from array import array

import pytest

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig
from evermind.model.init import init_params
from evermind.train.checkpoint import CheckpointError, pack_checkpoint, unpack_checkpoint
from evermind.train.cpu_backend import CpuBackend
from evermind.train.data import BatchSampler, eval_windows, split_held_out
from evermind.train.loop import Trainer
from evermind.train.schedule import Schedule
from evermind.types import TrainConfig

CONFIG = MambaConfig(d_model=16, n_layer=2, vocab_size=23, d_state=4)


def _tokens(n: int, seed: int = 0) -> array:
    # A learnable stream: a repeating pattern with a little noise.
    rng = random.Random(seed)
    pattern = [rng.randrange(CONFIG.vocab_size) for _ in range(11)]
    return array(
        "i", [pattern[i % 11] if rng.random() > 0.05 else rng.randrange(23) for i in range(n)]
    )


def _trainer(steps: int = 40, **kw) -> Trainer:
    cfg = TrainConfig(
        steps=steps,
        batch_size=2,
        seq_len=12,
        lr=1e-2,
        min_lr=1e-3,
        warmup_steps=5,
        eval_every=10,
        eval_batches=2,
        **kw,
    )
    train, held = split_held_out(_tokens(2000), 0.1)
    return Trainer(CpuBackend(CONFIG, init_params(CONFIG, seed=1), cfg), train, held, cfg)


def test_loss_falls_on_learnable_text() -> None:
    result = asyncio.run(_trainer(60).run())
    print(f"loss {result.initial_loss:.3f} -> {result.final_loss:.3f}, eval {result.eval_loss}")
    assert result.steps == 60
    assert result.final_loss < 0.5 * result.initial_loss
    assert result.eval_loss is not None and result.eval_loss < result.initial_loss


def test_resume_from_checkpoint_is_bit_identical() -> None:
    uninterrupted = _trainer(20)
    asyncio.run(uninterrupted.run())

    first = _trainer(20)
    asyncio.run(first.run(steps=8))
    blob = asyncio.run(first.checkpoint())
    resumed = _trainer(20)
    asyncio.run(resumed.restore(blob))
    assert resumed.step == 8
    asyncio.run(resumed.run())

    assert resumed.losses == uninterrupted.losses
    a = asyncio.run(uninterrupted.backend.state())
    b = asyncio.run(resumed.backend.state())
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


def test_gradient_accumulation_runs_and_counts_tokens() -> None:
    trainer = _trainer(3, grad_accum=2)
    result = asyncio.run(trainer.run())
    assert result.tokens == 3 * 2 * 12 * 2


def test_schedule_warms_up_then_decays_to_floor() -> None:
    s = Schedule(max_lr=1.0, total_steps=100, warmup_steps=10, min_lr=0.1)
    assert s.lr(0) == pytest.approx(0.1)
    assert s.lr(9) == pytest.approx(1.0)
    assert s.lr(10) == pytest.approx(1.0)
    assert s.lr(100) == pytest.approx(0.1)
    lrs = [s.lr(i) for i in range(10, 101)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))


def test_bad_settings_are_refused_in_words() -> None:
    with pytest.raises(ConfigError, match="warmup_steps"):
        Schedule(1.0, 10, 20)
    with pytest.raises(ConfigError, match="batch_size"):
        TrainConfig(batch_size=0)
    with pytest.raises(ConfigError, match="needs seq_len \\+ 1"):
        BatchSampler(array("i", [1, 2, 3]), 1, 8, 0)


def test_sampler_state_round_trips() -> None:
    tokens = _tokens(500)
    a = BatchSampler(tokens, 2, 8, seed=3)
    a.next()
    saved = a.state_dict()
    want = [a.next() for _ in range(3)]
    b = BatchSampler(tokens, 2, 8, seed=99)
    b.load_state_dict(saved)
    assert [b.next() for _ in range(3)] == want


def test_eval_windows_are_fixed_and_bounded() -> None:
    tokens = array("i", range(100))
    batches = eval_windows(tokens, 2, 10, 10)
    assert len(batches) == 4  # 100 tokens hold 9 windows of 10 (+1 target) -> 4 full batches
    assert list(batches[0][0][:3]) == [0, 1, 2] and list(batches[0][1][:3]) == [1, 2, 3]


def test_checkpoint_format_round_trip_and_errors() -> None:
    blob = pack_checkpoint({"step": 3}, {"w": array("f", [1.0, -2.5])})
    meta, tensors = unpack_checkpoint(blob)
    assert meta == {"step": 3} and list(tensors["w"]) == [1.0, -2.5]
    with pytest.raises(CheckpointError, match="magic"):
        unpack_checkpoint(b"nope" + blob[4:])
    with pytest.raises(CheckpointError, match="truncated"):
        unpack_checkpoint(blob[:-2])
