"""GPU recurrent decoding and embeddings against the numpy CPU model."""

from __future__ import annotations

import asyncio
import random

import numpy as np

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.gpu import GpuMamba
from evermind.model.gpu_infer import GpuDecoder, GpuEmbedder
from evermind.model.inference import apply_head_rows
from evermind.model.init import init_params
from evermind.model.sampling import sample
from evermind.package import EmbedderHead
from tests.numerics import assert_close

CONFIG = MambaConfig(d_model=20, n_layer=2, vocab_size=37, d_state=5, d_conv=4)


def _weights(device):
    params = init_params(CONFIG, seed=11)
    model = GpuMamba(device, CONFIG, 1, 4)
    model.load_params(params)
    return params, model


def test_recurrent_decoding_matches_cpu_step_and_parallel_forward(device) -> None:
    params, model = _weights(device)
    decoder = GpuDecoder(device, CONFIG, model.slots)
    cpu = CpuMamba(CONFIG, params)
    tokens = [3, 17, 0, 36, 5, 5, 9, 21, 30, 1, 2]
    parallel = cpu.forward(np.array([tokens]))[0]  # (L, V)
    state = cpu.init_state(1)
    decoder.reset()
    for t, token in enumerate(tokens):
        got = np.array(asyncio.run(decoder.step(token)), np.float32)
        ref, state = cpu.step(np.array([token]), state)
        assert_close(got, ref[0], atol=1e-4, rtol=1e-4, name=f"decode logits t={t} vs cpu step")
        assert_close(got, parallel[t], atol=1e-4, rtol=1e-4, name=f"decode logits t={t} vs forward")


def test_reset_starts_a_fresh_sequence(device) -> None:
    _, model = _weights(device)
    decoder = GpuDecoder(device, CONFIG, model.slots)
    decoder.reset()
    first = list(asyncio.run(decoder.step(4)))
    asyncio.run(decoder.step(8))
    decoder.reset()
    assert list(asyncio.run(decoder.step(4))) == first


def test_greedy_generation_matches_cpu_greedy(device) -> None:
    params, model = _weights(device)
    decoder = GpuDecoder(device, CONFIG, model.slots)
    got = asyncio.run(decoder.generate([1, 2, 3], max_new_tokens=12, temperature=0))
    cpu = CpuMamba(CONFIG, params)
    state = cpu.init_state(1)
    for token in [1, 2, 3]:
        logits, state = cpu.step(np.array([token]), state)
    want = []
    for _ in range(12):
        token = int(np.argmax(logits[0]))
        want.append(token)
        logits, state = cpu.step(np.array([token]), state)
    assert got == want


def test_embeddings_match_cpu_embed(device) -> None:
    params, model = _weights(device)
    embedder = GpuEmbedder(device, CONFIG, model.slots, batch_size=3, max_tokens=9)
    texts = [[1, 2, 3], [5], [7, 8, 9, 10, 11, 12, 13, 14, 15], [20, 21]]
    got = np.array(asyncio.run(embedder.embed_ids(texts)), np.float32)
    cpu = CpuMamba(CONFIG, params)
    for row, ids in enumerate(texts):
        ref = cpu.embed(np.array([ids]), np.ones((1, len(ids)), bool))[0]
        assert_close(got[row], ref, atol=1e-5, rtol=1e-4, name=f"embedding {row}")
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_sampling_respects_temperature_top_k_and_seed() -> None:
    logits = [0.0, 5.0, 4.9, -3.0, 1.0]
    assert sample(logits, 0.0, None, None, random.Random(0)) == 1
    draws = {sample(logits, 1.0, 2, None, random.Random(s)) for s in range(50)}
    assert draws <= {1, 2} and len(draws) == 2
    a = [sample(logits, 1.0, None, 0.9, random.Random(7)) for _ in range(5)]
    b = [sample(logits, 1.0, None, 0.9, random.Random(7)) for _ in range(5)]
    assert a == b


def test_embeddings_with_a_head_match_the_native_head(device) -> None:
    """A package's embedding head gives the same vectors in the tab (pure Python after the
    GPU readback) as natively (numpy, Model.embed's path)."""
    params, model = _weights(device)
    rng = np.random.default_rng(3)
    head = EmbedderHead.from_lists(
        (rng.normal(size=CONFIG.d_model) * 0.1).tolist(),
        rng.normal(size=(6, CONFIG.d_model)).tolist(),
        "distill",
        "teacher/test",
    )
    embedder = GpuEmbedder(device, CONFIG, model.slots, batch_size=2, max_tokens=9, head=head)
    texts = [[1, 2, 3], [5], [7, 8, 9, 10, 11]]
    got = np.array(asyncio.run(embedder.embed_ids(texts)), np.float32)
    cpu = CpuMamba(CONFIG, params)
    raw = np.stack([cpu.embed(np.array([ids]), np.ones((1, len(ids)), bool))[0] for ids in texts])
    want = apply_head_rows(head, raw)
    assert got.shape == (3, 6)
    assert_close(got, want, atol=1e-5, rtol=1e-4, name="embedding with head")
