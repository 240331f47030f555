"""The tab's pure-Python decoder (the CPU path without WebGPU) against the numpy decoder."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.init import init_params
from evermind.model.py_decode import PyDecoder

CONFIG = MambaConfig(vocab_size=97, d_model=32, n_layer=2, d_state=8, expand=2)


def _models(seed: int = 3) -> tuple[CpuMamba, PyDecoder]:
    params = init_params(CONFIG, seed)
    # Larger weights than the init's, so that every nonlinearity is far from linear.
    rng = np.random.default_rng(seed)
    for name, values in params.items():
        if name.endswith(("in_proj.weight", "x_proj.weight", "out_proj.weight")):
            noise = rng.normal(0.0, 0.2, len(values)).astype(np.float32)
            params[name] = type(values)("f", (np.asarray(values) + noise).tolist())
    return CpuMamba(CONFIG, params, dtype=np.float64), PyDecoder(CONFIG, params)


def test_step_logits_match_the_numpy_decoder_over_a_sequence() -> None:
    reference, decoder = _models()
    state = reference.init_state(1)
    worst = 0.0
    for token in [5, 17, 3, 96, 0, 42, 42, 8, 61, 1]:
        expected, state = reference.step(np.array([token]), state)
        got = np.array(decoder.step(token))
        worst = max(worst, float(np.max(np.abs(got - expected[0]))))
        assert np.argmax(got) == np.argmax(expected[0])
    assert worst < 1e-4, worst


def test_reset_forgets_the_sequence() -> None:
    _, decoder = _models()
    first = decoder.step(7)
    decoder.step(9)
    decoder.reset()
    assert decoder.step(7) == first


def test_stream_is_greedy_at_temperature_zero_and_stops_at_eos() -> None:
    reference, decoder = _models()
    state = reference.init_state(1)
    logits = None
    for token in [4, 5, 6]:
        logits, state = reference.step(np.array([token]), state)
    expected = []
    for _ in range(5):
        assert logits is not None
        token = int(np.argmax(logits[0]))
        expected.append(token)
        logits, state = reference.step(np.array([token]), state)

    async def collect(eos: int | None) -> list[int]:
        return [t async for t in decoder.stream([4, 5, 6], 5, 0.0, None, None, 0, eos)]

    assert asyncio.run(collect(None)) == expected
    assert asyncio.run(collect(expected[2])) == expected[:2]


def test_bad_token_and_empty_prompt_are_refused() -> None:
    _, decoder = _models()
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        decoder.step(CONFIG.vocab_size)

    async def empty() -> list[int]:
        return [t async for t in decoder.stream([], 3)]

    with pytest.raises(ConfigError, match="at least one prompt token"):
        asyncio.run(empty())


def test_embeddings_match_the_numpy_model() -> None:
    reference, decoder = _models()
    texts = [[5, 17, 3], [96], [8, 8, 8, 8, 61, 1, 0]]
    got = np.array(decoder.embed_ids(texts))
    for row, ids in zip(got, texts, strict=True):
        expected = reference.embed(np.array([ids]), np.ones((1, len(ids)), bool))[0]
        assert np.max(np.abs(row - expected)) < 1e-5
        assert abs(float(np.linalg.norm(row)) - 1.0) < 1e-6
    # Embedding leaves no decoding state behind: the next step is a fresh sequence's.
    after_embedding = decoder.step(7)
    decoder.reset()
    assert decoder.step(7) == after_embedding
