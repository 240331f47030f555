"""The block comparison's config picker (benchmarks/blocks.py): equal parameter counts.

The bench itself trains for minutes and asserts nothing; what it rests on is checked here:
every entry's picked shape is a valid config whose parameter count is within the stated
tolerance of the anchor's (the Mamba-1 nano preset), at the default vocabulary and at an
awkward one, and a search that cannot come close is refused with the nearest shape named.
"""

from __future__ import annotations

import asyncio
from array import array

import numpy as np
import pytest
from benchmarks.blocks import (
    ANCHOR,
    ENTRIES,
    TOLERANCE,
    BlockEntry,
    format_table,
    pick_configs,
)

from evermind.errors import ConfigError
from evermind.model import MambaConfig, init_params
from evermind.studio.bench.suite import train_and_measure
from evermind.train.cpu_backend import CpuBackend
from evermind.types import TrainConfig


@pytest.mark.parametrize("vocab_size", [2048, 1031])
def test_every_entry_matches_the_anchor_within_the_tolerance(vocab_size: int) -> None:
    picked = pick_configs(vocab_size)
    anchor = MambaConfig.preset("nano", vocab_size)
    assert [p.name for p in picked] == [e.name for e in ENTRIES]
    assert picked[0].kwargs["block"] == "mamba1" and picked[0].n_params == anchor.n_params
    for p in picked:
        config = p.config(vocab_size)  # a valid config, counted as the bench counts it
        print(f"{p.name}: {config.n_params:,} params ({p.gap:+.2%}) {p.kwargs}")
        assert config.n_params == p.n_params
        assert abs(config.n_params / anchor.n_params - 1) <= TOLERANCE
        assert config.block == p.kwargs["block"]
    blocks = {p.kwargs["block"] for p in picked}
    assert {"mamba1", "mamba2"} <= blocks


def test_a_search_that_cannot_match_is_refused_with_the_nearest_shape() -> None:
    tiny = BlockEntry(
        "mamba2-tiny", {"block": "mamba2", "head_dim": 16, "n_layer": 1}, {"d_model": (32,)}
    )
    with pytest.raises(ConfigError, match=r"no shape of 'mamba2-tiny' within 3% .* nearest: "):
        pick_configs(2048, (ANCHOR, tiny))
    impossible = BlockEntry(
        "bad", {"block": "mamba2", "head_dim": 48, "n_layer": 4}, {"d_model": (64,)}
    )
    with pytest.raises(ConfigError, match="nearest: none valid"):
        pick_configs(2048, (ANCHOR, impossible))
    with pytest.raises(ConfigError, match="the anchor 'bad' searches"):
        pick_configs(2048, (impossible, ANCHOR))


def test_train_and_measure_scores_the_same_slice_for_every_block() -> None:
    # Tiny shapes of both blocks, the same stream and settings: a real run of the bench's
    # measuring function (held-out loss finite, below the uniform guess after training).
    stream = array("i", (np.arange(3000) * 7 % 31).astype(np.int32).tolist())
    held = array("i", (np.arange(400) * 7 % 31).astype(np.int32).tolist())
    train = TrainConfig(
        steps=12, batch_size=2, seq_len=16, lr=1e-2, warmup_steps=2, eval_every=0, eval_batches=3
    )
    for extra in ({}, {"block": "mamba2", "head_dim": 8, "n_groups": 1, "chunk_size": 5}):
        config = MambaConfig(d_model=16, n_layer=2, vocab_size=31, d_state=4, **extra)
        backend = CpuBackend(config, init_params(config, 0), train)
        measured = asyncio.run(train_and_measure(backend, stream, held, train))
        print(config.block, measured)
        assert measured["steps"] == 12 and measured["tokens"] == 12 * 2 * 16
        assert measured["tokens_per_s"] > 0 and measured["seconds"] > 0
        assert measured["held_out_loss"] < np.log(31)  # learnt the repeating pattern a bit


def test_the_table_says_not_supported_yet_for_a_refused_cell() -> None:
    picked = pick_configs(2048)
    doc = {
        "corpus": "c",
        "vocab_size": 2048,
        "held_out_tokens": 4096,
        "settings": {"steps": 2, "batch_size": 4, "seq_len": 128},
        "configs": [
            {
                "block": p.name,
                "config": p.kwargs,
                "n_params": p.n_params,
                "gap": p.gap,
                "note": p.note,
            }
            for p in picked
        ],
        "cells": [
            {
                "block": "mamba1",
                "transport": "native",
                "device": "wgpu-py",
                "adapter": "x",
                "supported": True,
                "held_out_loss": 7.5,
                "tokens_per_s": 1234.0,
            },
            {
                "block": "mamba2",
                "transport": "native",
                "device": "wgpu-py",
                "adapter": "x",
                "supported": False,
                "error": "slot_specs: ...",
            },
        ],
        "errors": [],
    }
    table = "\n".join(format_table(doc, ["native"]))
    print(table)
    assert "| mamba1 | 728,704 | +0.00% | 7.5000 | 1,234 |" in table
    assert "| not supported yet | not supported yet |" in table
