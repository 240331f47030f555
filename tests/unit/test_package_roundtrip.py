"""Round trip, reproducibility, ZIP layout and writer-side checks of `.evermind` packages."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import sys
import zipfile
from array import array
from pathlib import Path

import numpy as np
import pytest

from evermind.errors import PackageError
from evermind.package import (
    SCHEMA,
    Tensor,
    expected_tensor_shapes,
    read_package,
    utc_timestamp,
    write_package,
    write_package_file,
)
from evermind.package.native import tensors_as_numpy
from tests import procs
from tests.unit.test_package_support import (
    CREATED_AT,
    tiny_config,
    tiny_package_kwargs,
    tiny_tensors,
    tiny_tokenizer_json,
)

ORDER = [
    "manifest.json",
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
]


def test_round_trip_float32_is_exact() -> None:
    kwargs = tiny_package_kwargs()
    package = read_package(write_package(**kwargs))
    assert set(package.tensors) == set(kwargs["tensors"])
    for name, tensor in kwargs["tensors"].items():
        got = package.tensors[name]
        assert got.shape == tensor.shape
        assert got.to_float32().tobytes() == tensor.to_float32().tobytes(), name
    assert package.tokenizer_json == kwargs["tokenizer_json"]
    assert package.config["hidden_size"] == 8
    assert package.config["torch_dtype"] == "float32"
    assert package.manifest["schema"] == SCHEMA
    assert package.manifest["training"] == kwargs["training"]
    assert package.manifest["bench"] == kwargs["bench"]
    assert package.manifest["model"]["n_params"] == sum(t.numel for t in kwargs["tensors"].values())
    assert package.manifest["tokenizer"] == {
        "type": "BPE",
        "vocab_size": 301,
        "special_tokens": {"<|endoftext|>": 0, "<|pad|>": 1},
    }
    assert package.generation_config == {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1}
    assert package.ref == "evermind/tiny-notes:1.0.0"


def test_round_trip_float16_upcasts_rounded_values() -> None:
    kwargs = tiny_package_kwargs(dtype="float16")
    package = read_package(write_package(**kwargs))
    assert package.manifest["model"]["dtype"] == "float16"
    assert package.config["torch_dtype"] == "float16"
    for name, tensor in kwargs["tensors"].items():
        expected = np.asarray(tensor.data, dtype=np.float32).astype(np.float16).astype(np.float32)
        got = np.asarray(package.tensors[name].data, dtype=np.float32)
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_same_inputs_give_the_same_bytes() -> None:
    first = write_package(**tiny_package_kwargs())
    second = write_package(**tiny_package_kwargs())
    assert first == second
    later = write_package(**tiny_package_kwargs(created_at="2025-02-01T00:00:00Z"))
    assert later != first
    assert read_package(first).digest == read_package(second).digest


def test_reproducible_in_a_fresh_interpreter(tmp_path: Path) -> None:
    here = write_package(**tiny_package_kwargs())
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from tests.unit.test_package_support import tiny_package_kwargs;"
        "from evermind.package import write_package;"
        "sys.stdout.buffer.write(write_package(**tiny_package_kwargs()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = procs.run(
        [sys.executable, "-c", script, str(Path(__file__).parents[2])],
        check=True,
        capture_output=True,
        env=env,
        timeout=60,
    ).stdout
    assert other == here


def test_zip_layout_is_fixed() -> None:
    archive = write_package(**tiny_package_kwargs())
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        infos = zf.infolist()
        assert [info.filename for info in infos] == ORDER
        assert zf.testzip() is None
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.external_attr >> 16 == 0o100644
            assert info.create_system == 3
            expected = (
                zipfile.ZIP_STORED
                if info.filename.endswith(".safetensors")
                else (zipfile.ZIP_DEFLATED)
            )
            assert info.compress_type == expected, info.filename
        weights = zf.getinfo("model.safetensors")
    name_len, extra_len = struct.unpack_from("<HH", archive, weights.header_offset + 26)
    data_start = weights.header_offset + 30 + name_len + extra_len
    assert data_start % 64 == 0
    (header_len,) = struct.unpack_from("<Q", archive, data_start)
    assert (8 + header_len) % 8 == 0  # tensors are 8-byte aligned in the file too


def test_manifest_lists_every_other_member() -> None:
    archive = write_package(**tiny_package_kwargs())
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        members = {name: zf.read(name) for name in zf.namelist()}
    import hashlib

    assert set(manifest["files"]) == set(ORDER[1:])
    for name, entry in manifest["files"].items():
        assert entry == {
            "sha256": hashlib.sha256(members[name]).hexdigest(),
            "size": len(members[name]),
        }
    assert manifest["created_at"] == CREATED_AT
    assert manifest["architecture"] == "mamba"
    for key in ("d_model", "n_layer", "d_state", "d_conv", "expand", "vocab_size", "n_params"):
        assert isinstance(manifest["model"][key], int)


@pytest.mark.skipif(shutil.which("unzip") is None, reason="unzip is not installed")
def test_unzip_tool_extracts_a_transformers_directory(tmp_path: Path) -> None:
    path = tmp_path / "tiny.evermind"
    write_package_file(path, **tiny_package_kwargs())
    procs.run(["unzip", "-q", str(path), "-d", str(tmp_path / "out")], check=True, timeout=60)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(ORDER)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["MambaForCausalLM"]
    assert (out / "tokenizer.json").read_text() == tiny_tokenizer_json()


def test_write_package_file_is_atomic_and_returns_the_digest(tmp_path: Path) -> None:
    path = tmp_path / "tiny.evermind"
    path.write_bytes(b"old contents")
    digest = write_package_file(path, **tiny_package_kwargs())
    assert read_package(path).digest == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.evermind"]
    assert path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(PackageError, match=r"tokenizer\.json"):
        write_package_file(path, **tiny_package_kwargs(tokenizer_json="{"))
    assert read_package(path).digest == digest  # a failed write leaves the old file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.evermind"]


def test_write_package_file_reports_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(PackageError, match="temporary file"):
        write_package_file(tmp_path / "nope" / "x.evermind", **tiny_package_kwargs())


def test_tensors_as_numpy_gives_shaped_float32() -> None:
    kwargs = tiny_package_kwargs()
    arrays = tensors_as_numpy(read_package(write_package(**kwargs)))
    embed = arrays["backbone.embeddings.weight"]
    assert embed.dtype == np.float32 and embed.shape == (301, 8)
    np.testing.assert_array_equal(
        embed.ravel(), np.asarray(kwargs["tensors"]["backbone.embeddings.weight"].data)
    )


def test_model_card_says_how_to_use_it() -> None:
    readme = read_package(write_package(**tiny_package_kwargs())).readme
    assert 'model="evermind/tiny-notes:1.0.0"' in readme
    assert "MambaForCausalLM.from_pretrained" in readme
    assert "stdlib docstrings (2 MB)" in readme
    assert "| perplexity | 29.96 |" in readme
    custom = read_package(write_package(**tiny_package_kwargs(readme="# mine\n"))).readme
    assert custom == "# mine\n"


def test_expected_shapes_follow_the_bias_and_tie_flags() -> None:
    base = expected_tensor_shapes(tiny_config())
    assert "lm_head.weight" not in base
    assert base["backbone.layers.0.mixer.conv1d.bias"] == (16,)
    assert "backbone.layers.0.mixer.in_proj.bias" not in base
    flipped = expected_tensor_shapes(
        tiny_config(use_bias=True, use_conv_bias=False, tie_word_embeddings=False)
    )
    assert flipped["lm_head.weight"] == (301, 8)
    assert flipped["backbone.layers.1.mixer.in_proj.bias"] == (32,)
    assert flipped["backbone.layers.1.mixer.out_proj.bias"] == (8,)
    assert "backbone.layers.1.mixer.conv1d.bias" not in flipped
    wide = expected_tensor_shapes(
        tiny_config(hidden_size=40, intermediate_size=80, time_step_rank="auto")
    )
    assert wide["backbone.layers.0.mixer.dt_proj.weight"] == (80, 3)  # ceil(40 / 16)


def test_utc_timestamp_formats_aware_datetimes() -> None:
    from datetime import datetime, timedelta, timezone

    moment = datetime(2025, 1, 31, 14, 0, 5, 999, tzinfo=timezone(timedelta(hours=2)))
    assert utc_timestamp(moment) == "2025-01-31T12:00:05Z"
    with pytest.raises(PackageError, match="naive"):
        utc_timestamp(datetime(2025, 1, 1))


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"name": "Bad Name"}, "'name'"),
        ({"version": ""}, "'version'"),
        ({"created_at": "2025-01-31 12:00:00"}, "'created_at'"),
        ({"created_at": "2025-02-30T12:00:00Z"}, "'created_at'"),
        ({"producer": ""}, "'producer'"),
        ({"bench": {"loss": float("nan")}}, "'bench'"),
        ({"training": {"when": object()}}, "training.when"),
        ({"dtype": "bfloat16"}, "bfloat16"),
        ({"tokenizer_json": tiny_tokenizer_json(302)}, "302 tokens"),
        ({"tokenizer_json": "[]"}, "tokenizer.json"),
        ({"config": tiny_config(model_type="llama")}, "model_type"),
        ({"config": tiny_config(intermediate_size=17)}, "intermediate_size"),
        ({"config": tiny_config(eos_token_id=301)}, "eos_token_id"),
    ],
)
def test_writer_refuses_bad_inputs(overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(PackageError, match=fragment):
        write_package(**tiny_package_kwargs(**overrides))


def test_writer_refuses_wrong_tensors() -> None:
    tensors = tiny_tensors(tiny_config())
    bad_shape = dict(tensors)
    bad_shape["backbone.layers.0.mixer.A_log"] = Tensor(
        shape=(16, 15), data=tensors["backbone.layers.0.mixer.A_log"].data[:240]
    )
    with pytest.raises(PackageError, match=r"A_log.*\(16, 15\).*\(16, 16\)"):
        write_package(**tiny_package_kwargs(tensors=bad_shape))
    missing = {k: v for k, v in tensors.items() if k != "backbone.norm_f.weight"}
    with pytest.raises(PackageError, match=r"missing tensor.*norm_f"):
        write_package(**tiny_package_kwargs(tensors=missing))
    extra = {**tensors, "lm_head.weight": tensors["backbone.embeddings.weight"]}
    with pytest.raises(PackageError, match=r"unexpected tensor.*lm_head"):
        write_package(**tiny_package_kwargs(tensors=extra))


def test_writer_refuses_float16_overflow_naming_the_tensor() -> None:
    tensors = tiny_tensors(tiny_config())
    values = tensors["backbone.norm_f.weight"].data
    assert isinstance(values, array)
    values[3] = 70000.0
    with pytest.raises(PackageError, match=r"norm_f.weight.*70000.0.*index 3"):
        write_package(**tiny_package_kwargs(tensors=tensors, dtype="float16"))
    write_package(**tiny_package_kwargs(tensors=tensors, dtype="float32"))  # fine in float32


def test_package_modules_import_without_numpy() -> None:
    script = (
        "import sys; sys.modules['numpy'] = None\n"
        "import pkgutil, importlib, evermind.package as p\n"
        # The two native-only modules: numpy helpers and the GGUF export (gguf needs numpy).
        "native = {'native', 'gguf_export'}\n"
        "names = [m.name for m in pkgutil.iter_modules(p.__path__) if m.name not in native]\n"
        "for name in names: importlib.import_module('evermind.package.' + name)\n"
        "print(len(names))\n"
    )
    result = procs.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 10
