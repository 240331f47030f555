"""GGUF export: llama.cpp (``llama-cpp-python``) loads what we write and computes what we do.

Each test writes a real package, exports it with ``evermind.package.gguf_export`` (or the CLI),
loads the file with ``llama_cpp.Llama`` and compares its logits and its greedy tokens with
``evermind.load``'s CPU model, for Mamba-1 and Mamba-2 blocks.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import llama_cpp
import numpy as np
import pytest

import evermind
from evermind.errors import ConfigError
from evermind.job import convert_package
from evermind.package import read_package
from evermind.package.gguf_export import export_gguf
from tests.factories import tiny_package
from tests.numerics import assert_close

TEXT = "The quick brown fox remembers what agents learn, and the state carries it."
# Float32 both sides, summed in other orders: logits of magnitude ~1 agree to float32 ulps.
ATOL = 1e-4


def _llama(path) -> object:
    return llama_cpp.Llama(
        str(path), n_ctx=256, logits_all=True, verbose=False, n_threads=1, n_threads_batch=1
    )


def _their_logits(llm, ids: list[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def _their_greedy(llm, ids: list[int], count: int) -> list[int]:
    llm.reset()
    out: list[int] = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0):
        out.append(int(token))
        if len(out) == count:
            break
    return out


def _our_greedy(model, ids: list[int], count: int) -> list[int]:
    logits, state = model.cpu.prefill(np.array([ids]))
    out: list[int] = []
    for _ in range(count):
        token = int(np.argmax(logits[0]))
        out.append(token)
        logits, state = model.cpu.step(np.array([token]), state)
    return out


@pytest.mark.parametrize(
    ("block", "arch"), [("mamba1", "mamba"), ("mamba2", "mamba2")], ids=["mamba1", "mamba2"]
)
def test_llama_cpp_loads_the_export_with_the_same_logits_and_greedy_tokens(
    tmp_path, block: str, arch: str
) -> None:
    data = tiny_package(name=f"gguf-{block}", steps=8, block=block)
    path = tmp_path / "model.gguf"
    summary = export_gguf(read_package(data), path)
    assert summary["arch"] == arch and summary["bytes"] == path.stat().st_size
    ours = evermind.load(data)
    llm = _llama(path)
    assert llm.n_vocab() == ours.config.vocab_size
    ids = ours.tokenizer.encode(TEXT)
    assert_close(_their_logits(llm, ids), ours.cpu.forward(np.array([ids]))[0], atol=ATOL, rtol=0)
    assert _their_greedy(llm, ids, 24) == _our_greedy(ours, ids, 24)
    # The tokenizer travels too: plain words tokenize to our ids there.
    assert llm.tokenize(TEXT.encode(), add_bos=False, special=False) == ids
    assert llm.detokenize(ids).decode() == TEXT


def test_a_nano_sized_model_exports_and_agrees_at_float16(tmp_path) -> None:
    # The default preset's width and depth (d_model 128, 4 layers), float16 tensors.
    data = tiny_package(name="gguf-nano", steps=2, d_model=128, n_layer=4)
    ours = evermind.load(data)
    ids = ours.tokenizer.encode(TEXT * 2)
    f32, f16 = tmp_path / "f32.gguf", tmp_path / "f16.gguf"
    export_gguf(read_package(data), f32)
    summary = export_gguf(read_package(data), f16, dtype="float16")
    assert summary["dtype"] == "float16"
    assert f16.stat().st_size < 0.6 * f32.stat().st_size
    reference = ours.cpu.forward(np.array([ids]))[0]
    assert_close(_their_logits(_llama(f32), ids), reference, atol=ATOL, rtol=0)
    # float16 weights: the rounding (2^-11 relative) shows in the logits, but stays small.
    drift = np.abs(_their_logits(_llama(f16), ids) - reference).max()
    assert 0 < drift < 0.05, drift


def test_an_int8_package_is_written_dequantised_and_matches_our_int8_model(tmp_path) -> None:
    int8 = convert_package(read_package(tiny_package(name="gguf-int8", steps=8)), "int8")
    path = tmp_path / "int8.gguf"
    export_gguf(read_package(int8), path)
    ours = evermind.load(int8)
    ids = ours.tokenizer.encode(TEXT)
    assert_close(
        _their_logits(_llama(path), ids), ours.cpu.forward(np.array([ids]))[0], atol=ATOL, rtol=0
    )


def test_bad_requests_are_refused_and_leave_no_file(tmp_path) -> None:
    package = read_package(tiny_package())
    with pytest.raises(ConfigError, match="dtype must be one of"):
        export_gguf(package, tmp_path / "m.gguf", dtype="int8")
    other = dataclasses.replace(package, config={**package.config, "model_type": "jamba"})
    with pytest.raises(ConfigError, match="no architecture for"):
        export_gguf(other, tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_writes_gguf_and_names_bad_flags(tmp_path) -> None:
    source = tmp_path / "tiny.evermind"
    source.write_bytes(tiny_package())
    base = [sys.executable, "-m", "evermind.cli", "export", "--model", str(source)]
    out = tmp_path / "tiny.gguf"
    done = subprocess.run(
        [*base, "--format", "gguf", "--out", str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["format"] == "gguf" and summary["arch"] == "mamba"
    assert out.stat().st_size == summary["bytes"]
    bad = subprocess.run(
        [*base, "--format", "gguf", "--float-embedding", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "--float-embedding" in bad.stderr
    missing = subprocess.run(
        [*base, "--out", str(tmp_path / "x.evermind")], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode != 0 and "--dtype is required" in missing.stderr
