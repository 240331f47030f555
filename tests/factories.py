"""Builders of small real artefacts for tests: tokenizers, models and `.evermind` packages.

Everything is made here, from a short text, with the project's own code: no fixture files.
"""

from __future__ import annotations

import asyncio
import random
from array import array
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from evermind.job import JobConfig, export_package, split, tokenize, train_tokenizer
from evermind.model.config import MambaConfig
from evermind.model.init import init_params
from evermind.tokenizer import Tokenizer
from evermind.train.adapt import AdaptConfig
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import TrainConfig, Trainer

TEXT = (
    "The quick brown fox jumps over the lazy dog. Evermind remembers what agents learn. "
    "A selective state space model reads tokens one at a time and keeps a small state. "
    "Memories are recalled by meaning and by exact words; caches save repeated work. "
) * 30
FIXED_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def run_sync(coroutine: Any) -> Any:
    """``asyncio.run``, also from a thread that already runs a loop (sync Playwright does)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@lru_cache(maxsize=4)
def tiny_tokenizer(vocab_size: int = 320) -> Tokenizer:
    """A byte-level BPE tokenizer trained on :data:`TEXT`."""
    return train_tokenizer(TEXT, vocab_size)


def tiny_config(
    tokenizer: Tokenizer, d_model: int = 16, n_layer: int = 2, block: str = "mamba1"
) -> MambaConfig:
    """A small model config for ``tokenizer`` (Mamba-2: 4 heads of 8 in 2 groups, chunks of 5)."""
    eos = tokenizer.eos_id or 0
    mamba2 = {"block": "mamba2", "head_dim": 8, "n_groups": 2, "chunk_size": 5}
    return MambaConfig(
        **(mamba2 if block == "mamba2" else {}),  # type: ignore[arg-type]
        d_model=d_model,
        n_layer=n_layer,
        vocab_size=tokenizer.vocab_size,
        d_state=4,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
    )


_TOWNS = [
    "Arden", "Brisk", "Calder", "Dunmore", "Elsby", "Fenwick", "Garth", "Holm", "Ivel",
    "Jarrow", "Kells", "Lorne", "Morrow", "Nairn", "Orton", "Penge",
]  # fmt: skip
#: A new domain for adaptation tests: one pattern :func:`tiny_package`'s model never read.
RIVERS = [
    f"The river of {t} is the {t}water; it flows east past the mill to the sea." for t in _TOWNS
]
#: An adaptation recipe short enough for a test, long enough to be accepted on RIVERS.
ADAPT_QUICK = AdaptConfig(steps=30, seq_len=32, lr=1e-2)


#: A cache of Python questions: "python" and "file" are in nearly every stored query (the
#: term-statistics tests of the cache and of ``evermind.search.terms``).
FILE_VERBS = [
    "read", "write", "copy", "delete", "rename", "zip", "unzip", "encrypt", "hash", "lock",
    "upload", "download", "parse", "split", "merge", "sort", "compress", "watch", "stream",
    "truncate", "append", "chmod", "mmap", "seek", "tail", "diff", "patch", "sign", "verify",
    "backup", "restore", "move", "touch", "checksum", "serialise", "deserialise", "tokenise",
    "index", "search", "open",
]  # fmt: skip
PYTHON_FILE_QUERIES = [f"How do I {verb} a file in Python?" for verb in FILE_VERBS] + [
    "Read a parquet dataset in Python with pyarrow",
    "Python file locking across processes with fcntl",
]


@lru_cache(maxsize=8)
def tiny_package(
    name: str = "tiny",
    version: str = "0.1.0",
    steps: int = 30,
    seed: int = 0,
    d_model: int = 16,
    n_layer: int = 2,
    block: str = "mamba1",
) -> bytes:
    """A real `.evermind` package: tokenizer + a model trained ``steps`` CPU steps on TEXT."""
    tok = tiny_tokenizer()
    config = tiny_config(tok, d_model=d_model, n_layer=n_layer, block=block)
    job = JobConfig(
        name=name,
        version=version,
        train=TrainConfig(
            steps=max(1, steps),
            batch_size=2,
            seq_len=16,
            lr=1e-2,
            warmup_steps=3,
            eval_every=0,
            seed=seed,
        ),
    )
    params = init_params(config, seed)
    backend = CpuBackend(config, params, job.train)
    train_ids, held = split(job, tokenize(tok, TEXT))
    result = None
    if steps > 0:
        result = run_sync(Trainer(backend, train_ids, held, job.train).run())
    return export_package(
        job,
        config,
        backend.params(),
        tok,
        result,
        "tests.factories.TEXT",
        "cpu",
        created_at=FIXED_TIME,
    )


def package_with_tokenizer(
    merges: list[str] | None = None, extra: object = None, producer: str = "tests"
) -> bytes:
    """An untrained tiny package whose ``tokenizer.json`` is edited: ``merges`` replaces the
    merge list, ``extra`` is added as a top-level field (the push-memory attacks)."""
    import json

    from evermind.package import read_package, write_package

    base = read_package(tiny_package("attack", "1.0.0", steps=0))
    spec = json.loads(base.tokenizer_json)
    if merges is not None:
        spec["model"]["merges"] = merges
    if extra is not None:
        spec["extra"] = extra
    return write_package(
        name="attack",
        version="1.0.0",
        created_at="2026-01-01T00:00:00Z",
        producer=producer,
        config=base.config,
        tensors=base.tensors,
        tokenizer_json=json.dumps(spec, separators=(",", ":")),
    )


def random_merges(count: int, seed: int = 0) -> list[str]:
    """``count`` random two-letter merges: a merge list that barely compresses."""
    import random

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [f"{rng.choice(letters)} {rng.choice(letters)}" for _ in range(count)]


def next_token_batch(vocab_size: int, rows: int, length: int, seed: int) -> tuple[array, array]:
    """``rows`` random windows of ``length + 1`` tokens as (inputs, next-token targets), flat
    ``array("i")`` rows-first: the batch the GPU model's step-equality tests feed."""
    rng = random.Random(seed)
    tokens = [rng.randrange(vocab_size) for _ in range(rows * (length + 1))]
    inputs, targets = array("i"), array("i")
    for row in range(rows):
        window = tokens[row * (length + 1) : (row + 1) * (length + 1)]
        inputs.extend(window[:-1])
        targets.extend(window[1:])
    return inputs, targets
