"""A package that carries a static embedder (``static_embedder.safetensors``) embeds with it.

The shipped base embedder goes into a tiny trained package (``with_embedder``, the function
behind ``evermind export --embedder``); the package must round-trip through write and read
byte for byte, embed exactly as :meth:`StaticEmbedder.embed` does, keep generating as before,
keep the embedder across re-stores, drop it on ``none``, be refused when the member and the
manifest disagree, and still load in ``transformers`` and llama.cpp, which ignore the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import evermind
from evermind.embedder.shipped import base_bytes, load_embedder_spec
from evermind.embedder.static import StaticEmbedder, fingerprint_of
from evermind.errors import InputError, PackageError
from evermind.job import convert_package, with_embedder
from evermind.package import read_package
from evermind.package.static_member import STATIC_FIELD, STATIC_MEMBER
from evermind.package.zip_writer import ZipMember, build_zip
from tests import procs
from tests.factories import tiny_package

TEXTS = [
    "Where did I put the spare house keys?",
    "The keys are in the blue bowl by the door.",
    "def embed(texts): return [vector(t) for t in texts]",
    "",
]


@lru_cache(maxsize=1)
def _plain() -> bytes:
    return tiny_package("static-emb", steps=4)


@lru_cache(maxsize=1)
def _with_base() -> bytes:
    return with_embedder(read_package(_plain()), "base")


def _members(archive: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _rebuild(members: dict[str, bytes], manifest: dict) -> bytes:  # type: ignore[type-arg]
    """Members re-zipped in order with ``manifest``, its files table re-hashed."""
    members = dict(members)
    manifest["files"] = {
        name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for name, data in members.items()
        if name != "manifest.json"
    }
    members["manifest.json"] = json.dumps(manifest).encode()
    order = ["manifest.json", *sorted(n for n in members if n != "manifest.json")]
    return build_zip(
        [ZipMember(n, members[n], compress=not n.endswith(".safetensors")) for n in order]
    )


def test_a_package_with_the_base_embedder_embeds_with_it_and_round_trips() -> None:
    data = _with_base()
    package = read_package(data)
    members = _members(data)
    # The member is the shipped file byte for byte, and the manifest says what it is.
    assert members[STATIC_MEMBER] == base_bytes()
    assert package.manifest[STATIC_FIELD] == {
        "format": "evermind-static-embedder",
        "dims": 256,
        "vocab_size": 30522,
        "storage": "int8",
        "fingerprint": fingerprint_of(base_bytes()),
        "source": "base",
    }
    assert package.static_embedder is not None
    assert package.static_embedder.data == base_bytes()
    assert package.static_embedder.source == "base"
    # Write -> read -> write gives the same bytes; a re-store at its own dtype the same
    # members (only the manifest's producer says who re-stored it).
    assert with_embedder(package, "base") == data
    restored = _members(convert_package(package, "float32"))
    assert {k: v for k, v in restored.items() if k not in ("manifest.json", "README.md")} == {
        k: v for k, v in _members(data).items() if k not in ("manifest.json", "README.md")
    }

    base = load_embedder_spec("base")
    model, plain = evermind.load(data), evermind.load(_plain())
    vectors = model.embed(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 256)
    np.testing.assert_array_equal(vectors, base.embed(TEXTS))
    assert model.embed_dim == 256 and plain.embed_dim == plain.config.d_model
    assert model.similarity_trained and not plain.similarity_trained
    counted, tokens = model.embed_counted(TEXTS)
    np.testing.assert_array_equal(counted, vectors)
    assert tokens == [len(base.tokenizer.encode(t)) for t in TEXTS] and tokens[-1] == 0
    with pytest.raises(Exception, match="list of texts"):
        model.embed("one text")
    # The language model is untouched: same logits, same pooled state, same affect input.
    ids = np.array([model.tokenizer.encode(TEXTS[0])])
    np.testing.assert_array_equal(model.cpu.forward(ids), plain.cpu.forward(ids))
    np.testing.assert_array_equal(model.embed_raw(TEXTS[:2]), plain.embed_raw(TEXTS[:2]))
    # Its vectors are cached under the package's digest, never the plain package's.
    assert model.fingerprint == package.digest != plain.fingerprint
    # Built without its embedder (below evermind.load), it refuses to embed rather than
    # embed another way; and an embedder that is not the package's is refused.
    from evermind.errors import ConfigError
    from evermind.model.inference import Model, load

    with pytest.raises(ConfigError, match=r"evermind\.load"):
        load(data).embed(TEXTS)
    other = StaticEmbedder(base.tokenizer, base.stored, [1.0] * base.tokenizer.vocab_size)
    with pytest.raises(ConfigError, match="not the static embedder"):
        Model(package, text_embedder=other)
    with pytest.raises(ConfigError, match="not the static embedder"):
        Model(read_package(_plain()), text_embedder=base)


def test_re_stores_keep_it_and_none_removes_it(tmp_path: Path) -> None:
    package = read_package(_with_base())
    half = read_package(convert_package(package, "float16"))
    assert half.manifest["model"]["dtype"] == "float16"
    assert half.static_embedder is not None
    assert half.manifest[STATIC_FIELD] == package.manifest[STATIC_FIELD]
    int8 = read_package(with_embedder(read_package(_plain()), "base", "int8"))
    assert int8.manifest["model"]["dtype"] == "int8" and int8.static_embedder is not None
    # Re-putting the embedder into an int8 package keeps its int8 layout.
    again = read_package(with_embedder(int8, "base"))
    assert again.manifest["quantization"] == int8.manifest["quantization"]

    removed = with_embedder(package, "none")
    assert read_package(removed).static_embedder is None
    assert STATIC_MEMBER not in _members(removed)
    assert STATIC_FIELD not in read_package(removed).manifest
    np.testing.assert_array_equal(
        evermind.load(removed).embed(TEXTS[:2]), evermind.load(_plain()).embed(TEXTS[:2])
    )

    # A file of one's own, by path; its manifest source is the file's name.
    own = tmp_path / "mine.safetensors"
    own.write_bytes(base_bytes())
    by_path = read_package(with_embedder(read_package(_plain()), str(own)))
    assert by_path.manifest[STATIC_FIELD]["source"] == "mine.safetensors"
    with pytest.raises(InputError, match="does not exist"):
        with_embedder(package, str(tmp_path / "missing.safetensors"))
    not_one = tmp_path / "not.safetensors"
    not_one.write_bytes(_plain())
    with pytest.raises(PackageError):
        with_embedder(package, str(not_one))


def test_the_reader_refuses_a_member_the_manifest_does_not_describe() -> None:
    members = _members(_with_base())
    manifest = json.loads(members["manifest.json"])

    def refused(edit_manifest: dict | None = None, drop: bool = False) -> str:  # type: ignore[type-arg]
        changed = json.loads(json.dumps(manifest))
        if edit_manifest is not None:
            changed[STATIC_FIELD].update(edit_manifest)
        kept = {k: v for k, v in members.items() if not (drop and k == STATIC_MEMBER)}
        with pytest.raises(PackageError) as err:
            read_package(_rebuild(kept, changed))
        return str(err.value)

    assert "dims" in refused({"dims": 128})
    assert "fingerprint" in refused({"fingerprint": "static-" + "0" * 16})
    assert "vocab_size" in refused({"vocab_size": 100})
    assert "storage" in refused({"storage": "float16"})
    assert STATIC_FIELD in refused({"extra": 1})
    assert STATIC_FIELD in refused({"format": "something-else"})
    assert STATIC_MEMBER in refused(drop=True)
    # The member without the field.
    bare = json.loads(json.dumps(manifest))
    del bare[STATIC_FIELD]
    with pytest.raises(PackageError, match=STATIC_MEMBER):
        read_package(_rebuild(members, bare))
    # A member that is no embedder file, with a field that claims it is.
    corrupt = {**members, STATIC_MEMBER: members[STATIC_MEMBER][:-10]}
    with pytest.raises(PackageError, match=STATIC_MEMBER):
        read_package(_rebuild(corrupt, json.loads(json.dumps(manifest))))


def test_transformers_and_llama_cpp_still_load_it(tmp_path: Path) -> None:
    # make test installs transformers, torch and llama-cpp-python: a missing one fails.
    import torch
    import transformers

    data = _with_base()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(tmp_path / "hf")
    assert (tmp_path / "hf" / STATIC_MEMBER).is_file()
    model = transformers.MambaForCausalLM.from_pretrained(tmp_path / "hf")
    ours = evermind.load(data)
    ids = ours.tokenizer.encode(TEXTS[0])
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(theirs, ours.cpu.forward(np.array([ids]))[0], atol=1e-4)

    import llama_cpp

    from evermind.package.gguf_export import export_gguf

    path = tmp_path / "model.gguf"
    export_gguf(read_package(data), path)
    llm = llama_cpp.Llama(str(path), n_ctx=64, verbose=False, n_threads=1)
    assert llm.n_vocab() == ours.config.vocab_size


def test_cli_export_embedder(tmp_path: Path) -> None:
    source = tmp_path / "plain.evermind"
    source.write_bytes(_plain())
    out = tmp_path / "with.evermind"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}

    def evermind_cli(*args: str) -> subprocess.CompletedProcess[str]:
        script = shutil.which("evermind", path=str(Path(sys.executable).parent))
        assert script, f"no `evermind` script beside {sys.executable}: pip install -e . first"
        return procs.run(
            [script, *args], capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path
        )

    done = evermind_cli("export", "--model", str(source), "--embedder", "base", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["embedder"] == "base" and summary["dtype"] == "float32"
    assert out.read_bytes() == _with_base()

    missing = evermind_cli(
        "export", "--model", str(source), "--embedder", "nope.safetensors", "--out", str(out)
    )
    assert missing.returncode != 0
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.safetensors" in lines[0] and "Traceback" not in lines[0]
    neither = evermind_cli("export", "--model", str(source), "--out", str(out))
    assert neither.returncode != 0 and "--embedder" in neither.stderr


def test_the_runtime_budget_counts_the_embedder(tmp_path: Path) -> None:
    from evermind.runtime.installs import Install
    from evermind.runtime.registry import estimate_bytes

    def estimate(data: bytes) -> int:
        package = read_package(data)
        install = Install("t", package.name, package.version, package.digest, len(data), 0.0,
                          package.manifest, tmp_path / "p.evermind")  # fmt: skip
        return estimate_bytes(install)

    extra = estimate(_with_base()) - estimate(_plain())
    # The file as the package holds it, the embedder's stored table (as large), and the
    # float32 table embed_numpy builds from it.
    assert extra == 2 * len(base_bytes()) + 4 * 30522 * 256
    model = evermind.load(_with_base())
    model.embed(["built"])
    assert isinstance(model.text_embedder, StaticEmbedder)
    assert model.text_embedder.matrix().nbytes == 4 * 30522 * 256
