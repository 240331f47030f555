"""CpuDecoder (evermind.model.cpu_decode) against one-by-one decoding.

The reference is what the runtime served before batching: ``CpuMamba.step`` on batch 1, token
by token (the prompt included), as :meth:`evermind.model.inference.Model.stream` does. Batched
rows differ from it only by the float32 matrix products' rounding (OpenBLAS picks kernels by
row count); the largest logit difference measured here is ~1e-5 and the bound is
:data:`LOGIT_TOL`. Generated text (greedy and seeded sampling, through the one sampler) must be
identical.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import evermind
from evermind.errors import ConfigError, ShapeError
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_decode import STEP_PREFILL_TOKENS, CpuDecoder, _length_groups
from evermind.model.inference import Model
from evermind.model.sampling import sample
from tests.factories import tiny_package

LOGIT_TOL = 2e-4

PROMPTS = [
    "The",
    "Memories are recalled by meaning",
    "a",
    "The standard library has many modules for text and numbers",
    "Caches save repeated work",
    "The",
    "numbers and words and more words",
    "x y z",
]


@pytest.fixture(scope="module")
def model() -> Model:
    return evermind.load(tiny_package("decode", "1.0.0", steps=40, d_model=32, n_layer=2))


def alone(cpu: CpuMamba, prompt: list[int], then: list[int]) -> list[np.ndarray]:
    """Logits after the prompt, then after each of ``then``: batch 1, token by token."""
    state = cpu.init_state(1)
    logits = None
    for token in prompt:
        logits, state = cpu.step(np.array([token]), state)
    assert logits is not None
    rows = [logits[0].copy()]
    for token in then:
        logits, state = cpu.step(np.array([token]), state)
        rows.append(logits[0].copy())
    return rows


def generate_batched(
    decoder: CpuDecoder, model: Model, prompts: list[str], seeds: list[int | None], temp: float,
    max_new: int = 24,
) -> list[list[int]]:  # fmt: skip
    """Every prompt decoded together (one slot each), each with its own Random(seed)."""
    ids = [model._prompt_ids(p) for p in prompts]
    slots = list(range(len(prompts)))
    logits = decoder.prefill(slots, ids)
    rngs = [random.Random(s) for s in seeds]
    out: list[list[int]] = [[] for _ in prompts]
    active = list(slots)
    eos = model.tokenizer.eos_id
    for _ in range(max_new):
        rows = {slot: logits[i] for i, slot in enumerate(active)}
        nxt = []
        for slot in active:
            token = sample(rows[slot].tolist(), temp, 40, 0.95, rngs[slot])
            out[slot].append(token)
            if token != eos:
                nxt.append(slot)
        if not nxt:
            break
        for slot in set(active) - set(nxt):
            decoder.release(slot)
        active = nxt
        logits = decoder.step(active, [out[s][-1] for s in active])
    return out


def test_prefill_of_mixed_lengths_matches_token_by_token(model: Model) -> None:
    decoder = CpuDecoder(model, slots=16)
    ids = [model._prompt_ids(p) for p in PROMPTS]
    assert len({len(i) for i in ids}) > 3  # really mixed lengths
    lengths = [len(i) for i in ids]  # both prefill paths: stepped (short) and the scan (long)
    assert min(lengths) <= STEP_PREFILL_TOKENS < max(lengths), lengths
    slots = [3, 0, 9, 15, 4, 1, 2, 7]
    logits = decoder.prefill(slots, ids)
    assert logits.shape == (len(ids), model.config.vocab_size) and logits.dtype == np.float32
    worst = 0.0
    follow = [5, 17, 3]
    stepped = [decoder.step(slots, [t] * len(slots)) for t in follow]
    for row, prompt in enumerate(ids):
        ref = alone(model.cpu, prompt, follow)
        worst = max(worst, float(np.abs(logits[row] - ref[0]).max()))
        for k in range(len(follow)):
            worst = max(worst, float(np.abs(stepped[k][row] - ref[k + 1]).max()))
    print(f"max |batched - alone| logit difference: {worst:.2e}")
    assert worst < LOGIT_TOL


def test_a_row_does_not_depend_on_its_batch_mates(model: Model) -> None:
    ids = [model._prompt_ids(p) for p in PROMPTS]
    solo = CpuDecoder(model, slots=1)
    crowd = CpuDecoder(model, slots=len(ids))
    crowd.prefill(range(len(ids)), ids)
    rows = crowd.step(range(len(ids)), [7] * len(ids))
    for i, prompt in enumerate(ids):
        solo.prefill([0], [prompt])
        one = solo.step([0], [7])
        assert np.abs(one[0] - rows[i]).max() < LOGIT_TOL


@pytest.mark.parametrize("temperature", [0.0, 0.8, 1.2])
def test_generated_text_equals_one_by_one_generation(model: Model, temperature: float) -> None:
    seeds: list[int | None] = [11 * i + 1 for i in range(len(PROMPTS))]
    decoder = CpuDecoder(model, slots=len(PROMPTS))
    batched = generate_batched(decoder, model, PROMPTS, seeds, temperature)
    for prompt, seed, tokens in zip(PROMPTS, seeds, batched, strict=True):
        eos = model.tokenizer.eos_id
        text = model.tokenizer.decode([t for t in tokens if t != eos])
        reference = model.complete(
            prompt, max_new_tokens=24, temperature=temperature, top_k=40, top_p=0.95, seed=seed
        )
        assert text == reference.text, (prompt, seed)


def test_released_slots_are_reused_without_leftovers(model: Model) -> None:
    ids = [model._prompt_ids(p) for p in PROMPTS[:4]]
    decoder = CpuDecoder(model, slots=2)
    decoder.prefill([0, 1], ids[:2])
    for _ in range(5):
        decoder.step([0, 1], [9, 9])
    decoder.release(1)
    with pytest.raises(ShapeError, match="hold no sequence"):
        decoder.step([0, 1], [1, 1])
    fresh = decoder.prefill([1], [ids[2]])  # a new sequence in the old slot
    after = decoder.step([1, 0], [4, 4])
    ref = alone(model.cpu, ids[2], [4])
    assert np.abs(fresh[0] - ref[0]).max() < LOGIT_TOL
    assert np.abs(after[0] - ref[1]).max() < LOGIT_TOL
    # slot 0 went on undisturbed: its 5 steps of 9 and then the 4
    ref0 = alone(model.cpu, ids[0], [9] * 5 + [4])
    assert np.abs(after[1] - ref0[-1]).max() < LOGIT_TOL


def test_bad_calls_say_what_is_wrong(model: Model) -> None:
    decoder = CpuDecoder(model, slots=2)
    with pytest.raises(ShapeError, match="repeat"):
        decoder.prefill([0, 0], [[1], [2]])
    with pytest.raises(ShapeError, match=r"in \[0, 2\)"):
        decoder.prefill([2], [[1]])
    with pytest.raises(ShapeError, match="non-empty prompt"):
        decoder.prefill([0], [[]])
    with pytest.raises(ShapeError, match="hold no sequence"):
        decoder.step([0], [1])
    decoder.prefill([0], [[1, 2]])
    with pytest.raises(ShapeError, match="one token per slot"):
        decoder.step([0], [1, 2])
    with pytest.raises(ConfigError):
        CpuDecoder(object())
    with pytest.raises(ConfigError):
        CpuDecoder(model, slots=0)


def test_length_groups_bound_the_padding() -> None:
    groups = _length_groups([1, 2, 30, 31, 32, 100, 2])
    assert sorted(i for g in groups for i in g) == list(range(7))
    assert [sorted(g) for g in groups] == [[0, 1, 6], [2, 3, 4], [5]]


def test_decoder_satisfies_the_contract(model: Model) -> None:
    from evermind.model.decode import Decoder

    assert isinstance(CpuDecoder(model, slots=3), Decoder)
