"""The batched GPU decoder against the numpy model, row for row (wgpu-py, lavapipe here)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_decode import CpuDecoder
from evermind.model.decode import Decoder
from evermind.model.gpu_decode import GpuBatchDecoder, run_sync
from evermind.model.init import init_params
from tests.numerics import assert_close

# d_inner 40, vocab 37 (odd), d_state 5: no size is a multiple of a workgroup.
CONFIG = MambaConfig(d_model=20, n_layer=2, vocab_size=37, d_state=5, d_conv=4)
PARAMS = init_params(CONFIG, seed=11)
TOL = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(scope="module")
def decoder(device) -> GpuBatchDecoder:
    return GpuBatchDecoder.from_params(device, CONFIG, PARAMS, slots=5)


def _cpu_logits(tokens: list[int]) -> np.ndarray:
    """The numpy model's logits after each token of one sequence decoded alone, (L, V)."""
    cpu = CpuMamba(CONFIG, PARAMS)
    state = cpu.init_state(1)
    rows = []
    for token in tokens:
        logits, state = cpu.step(np.array([token]), state)
        rows.append(logits[0])
    return np.stack(rows)


def test_is_a_decoder(decoder) -> None:
    assert isinstance(decoder, Decoder)
    assert decoder.slots == 5 and decoder.vocab_size == CONFIG.vocab_size


def test_mixed_prompt_lengths_then_steps_match_numpy_row_for_row(decoder) -> None:
    slots = [3, 0, 4]
    prompts = [[5, 9], [1, 2, 3, 4, 5, 6, 7], [36]]
    follow = [[8, 0, 2], [11, 11, 30], [7, 6, 5]]  # fed token by token after the prompt
    got = decoder.prefill(slots, prompts)
    assert got.shape == (3, CONFIG.vocab_size) and got.dtype == np.float32
    want = [_cpu_logits(p + f) for p, f in zip(prompts, follow, strict=True)]
    for row, prompt in enumerate(prompts):
        assert_close(got[row], want[row][len(prompt) - 1], **TOL, name=f"prefill row {row}")
    for t in range(3):
        got = decoder.step(slots, [f[t] for f in follow])
        for row, prompt in enumerate(prompts):
            assert_close(got[row], want[row][len(prompt) + t], **TOL, name=f"step {t} row {row}")


def test_a_row_does_not_depend_on_its_batch_mates(decoder) -> None:
    alone = decoder.prefill([1], [[4, 8, 15]])
    alone_steps = [decoder.step([1], [t])[0] for t in (16, 23)]
    batched = decoder.prefill([2, 1, 0], [[9, 9, 9, 9], [4, 8, 15], [30]])
    assert np.array_equal(batched[1], alone[0])
    for t, want in zip((16, 23), alone_steps, strict=True):
        got = decoder.step([0, 1, 2], [3, t, 5])
        assert np.array_equal(got[1], want), "batch mates changed a row"


def test_steps_on_a_subset_leave_other_slots_alone(decoder) -> None:
    decoder.prefill([0, 1], [[3, 4], [3, 4]])
    decoder.step([0], [10])  # slot 1 waits a step
    decoder.step([0], [11])
    got = decoder.step([1, 0], [10, 12])
    assert_close(got[0], _cpu_logits([3, 4, 10])[-1], **TOL, name="the waiting slot")
    assert_close(got[1], _cpu_logits([3, 4, 10, 11, 12])[-1], **TOL, name="the stepping slot")


def test_release_and_reuse_start_fresh(decoder) -> None:
    first = decoder.prefill([2], [[6, 7, 8]])
    decoder.step([2], [9])
    decoder.release(2)
    with pytest.raises(ConfigError, match="prefill first"):
        decoder.step([2], [1])
    again = decoder.prefill([2], [[6, 7, 8]])
    assert np.array_equal(again, first), "a reused slot kept its old state"


def test_rejects_bad_calls(decoder) -> None:
    decoder.prefill([0], [[1]])
    with pytest.raises(ConfigError, match="twice"):
        decoder.step([0, 0], [1, 2])
    with pytest.raises(ConfigError, match="outside"):
        decoder.step([5], [1])
    with pytest.raises(ConfigError, match="vocabulary"):
        decoder.step([0], [CONFIG.vocab_size])
    with pytest.raises(ShapeError, match="2 slots for 1"):
        decoder.step([0, 1], [1])
    with pytest.raises(ShapeError, match="at least one token"):
        decoder.prefill([1], [[]])
    with pytest.raises(ConfigError, match="slots"):
        GpuBatchDecoder(decoder.device, CONFIG, decoder.weights, 0)


def test_run_sync_refuses_a_suspending_coroutine() -> None:
    import asyncio

    async def suspends() -> int:
        await asyncio.sleep(0)
        return 1

    async def returns() -> int:
        return 2

    assert run_sync(returns()) == 2
    with pytest.raises(Exception, match="synchronously"):
        run_sync(suspends())


def test_matches_the_numpy_decoder_row_for_row(decoder) -> None:
    cpu = CpuDecoder(CpuMamba(CONFIG, PARAMS), slots=5)
    slots, prompts = [4, 1, 2, 0], [[2, 3, 5, 7, 11], [13], [17, 19, 23], [29, 31, 2, 3]]
    assert_close(
        decoder.prefill(slots, prompts), cpu.prefill(slots, prompts), **TOL, name="prefill"
    )
    rng = np.random.default_rng(5)
    for t in range(6):
        live = slots[: 4 - t // 2]  # sequences leave the batch as it goes
        tokens = rng.integers(0, CONFIG.vocab_size, len(live)).tolist()
        got, want = decoder.step(live, tokens), cpu.step(live, tokens)
        assert_close(got, np.asarray(want), **TOL, name=f"step {t}")
        if t % 2 == 1:
            decoder.release(slots[3 - t // 2])
            cpu.release(slots[3 - t // 2])
