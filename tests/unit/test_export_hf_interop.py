"""An exported `.evermind` unzips into a folder that transformers' MambaForCausalLM loads,
and it gives the same logits as our CPU model (torch CPU)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

import evermind
from tests.factories import tiny_package

torch = pytest.importorskip("torch", reason="torch is the interop reference (test extra)")
transformers = pytest.importorskip("transformers", reason="transformers is the interop reference")

pytestmark = pytest.mark.slow


def test_unzipped_package_loads_in_transformers_with_the_same_logits(tmp_path) -> None:
    data = tiny_package(name="interop", steps=10)
    path = tmp_path / "interop.evermind"
    path.write_bytes(data)
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tmp_path / "unzipped")
    hf = transformers.MambaForCausalLM.from_pretrained(tmp_path / "unzipped").eval()
    ours = evermind.load(path)
    ids = np.array([ours.tokenizer.encode("The quick brown fox remembers what agents learn.")])
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    mine = ours.cpu.forward(ids)
    print(f"max |logit diff| = {np.abs(theirs - mine).max():.2e}")
    np.testing.assert_allclose(theirs, mine, atol=1e-4, rtol=1e-4)
    # The tokenizer file is the one transformers' fast tokenizer reads, with the same ids.
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "unzipped" / "tokenizer.json")
    )
    text = "Memories are recalled by meaning — and by exact words: TSR-417."
    assert fast.encode(text) == ours.tokenizer.encode(text)
