"""read_package refuses every corruption and every limit breach with a PackageError naming it."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import warnings
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evermind.errors import ConfigError, PackageError
from evermind.package import PackageLimits, Tensor, read_package, write_package
from evermind.package.safetensors_io import encode_safetensors
from evermind.package.zip_writer import ZipMember, build_zip
from tests.unit.test_package_support import (
    tiny_config,
    tiny_package_kwargs,
    tiny_tensors,
    tiny_tokenizer_json,
)

GOOD = write_package(**tiny_package_kwargs())


def members_of(archive: bytes) -> dict[str, bytes]:
    """Member name -> contents, in archive order (read with the trusted zipfile)."""
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def rebuild(members: dict[str, bytes], *, rehash: bool = True) -> bytes:
    """Re-zip members in the given order; with `rehash`, fix the manifest's files table."""
    members = dict(members)
    if rehash and "manifest.json" in members:
        manifest = json.loads(members["manifest.json"])
        manifest["files"] = {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in members.items()
            if name != "manifest.json"
        }
        members["manifest.json"] = json.dumps(manifest).encode()
    return build_zip(
        [
            ZipMember(name, data, compress=not name.endswith(".safetensors"))
            for name, data in members.items()
        ]
    )


def with_manifest(edit: Callable[[dict[str, Any]], None], *, rehash: bool = False) -> bytes:
    """GOOD with its manifest edited (checksums left as they were unless `rehash`)."""
    members = members_of(GOOD)
    manifest = json.loads(members["manifest.json"])
    edit(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    return rebuild(members, rehash=rehash)


def with_member(name: str, data: bytes) -> bytes:
    """GOOD with one member replaced and the checksums fixed up."""
    members = members_of(GOOD)
    members[name] = data
    return rebuild(members, rehash=name != "manifest.json")


def central_entry(archive: bytes, name: str) -> int:
    """Offset of the central-directory record of member `name`."""
    position = archive.find(b"PK\x01\x02")
    while position >= 0:
        length = struct.unpack_from("<H", archive, position + 28)[0]
        if archive[position + 46 : position + 46 + length] == name.encode():
            return position
        position = archive.find(b"PK\x01\x02", position + 4)
    raise AssertionError(name)


def patch_header(archive: bytes, name: str, field: str, value: int) -> bytes:
    """Set a 16-bit field ('flags' or 'method') in both the local and central header."""
    data = bytearray(archive)
    central = central_entry(archive, name)
    local = struct.unpack_from("<I", archive, central + 42)[0]
    local_offset, central_offset = {"flags": (6, 8), "method": (8, 10)}[field]
    struct.pack_into("<H", data, local + local_offset, value)
    struct.pack_into("<H", data, central + central_offset, value)
    return bytes(data)


def refused(data: bytes | str | Path, *, limits: PackageLimits | None = None) -> str:
    """The PackageError message read_package gives for `data` (fails if it accepts it)."""
    with pytest.raises(PackageError) as info:
        read_package(data, limits=limits)
    message = str(info.value)
    assert "no specific check caught" not in message, message
    return message


def test_good_package_reads_from_bytes_and_path(tmp_path: Path) -> None:
    path = tmp_path / "good.evermind"
    path.write_bytes(GOOD)
    assert read_package(path).digest == read_package(GOOD).digest
    assert read_package(bytearray(GOOD)).manifest["name"] == "tiny-notes"


# --- archive-level corruption -------------------------------------------------------------


def test_truncated_archive() -> None:
    assert "archive" in refused(GOOD[: len(GOOD) // 2])
    assert "archive" in refused(GOOD[:-1])
    assert "archive" in refused(b"")


def test_bit_flip_in_stored_tensor_data() -> None:
    data = bytearray(GOOD)
    central = central_entry(GOOD, "model.safetensors")
    local = struct.unpack_from("<I", GOOD, central + 42)[0]
    data[local + 30 + 17 + 2000] ^= 0x10  # well inside the stored tensor bytes
    message = refused(bytes(data))
    assert "model.safetensors" in message and "CRC" in message


def test_bit_flip_in_deflated_member() -> None:
    data = bytearray(GOOD)
    local = struct.unpack_from("<I", GOOD, central_entry(GOOD, "tokenizer.json") + 42)[0]
    data[local + 30 + 14 + 200] ^= 0xFF
    assert "tokenizer.json" in refused(bytes(data))


def test_not_a_zip_and_missing_file(tmp_path: Path) -> None:
    assert "archive" in refused(b"PK" + b"\0" * 100)
    assert "cannot be read" in refused(tmp_path / "absent.evermind")
    assert "expected bytes or a file path" in refused(12345)  # type: ignore[arg-type]


# --- member set and checksums -------------------------------------------------------------


def test_wrong_checksum() -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["files"]["config.json"]["sha256"] = "0" * 64

    message = refused(with_manifest(edit))
    assert "config.json" in message and "sha256" in message


def test_member_altered_without_updating_manifest() -> None:
    members = members_of(GOOD)
    members["README.md"] = members["README.md"].replace(b"tiny", b"tiNy")
    message = refused(rebuild(members, rehash=False))
    assert "README.md" in message and "sha256" in message


def test_wrong_size_in_manifest() -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["files"]["tokenizer.json"]["size"] += 1

    message = refused(with_manifest(edit))
    assert "tokenizer.json" in message and "bytes" in message


def test_missing_member() -> None:
    members = members_of(GOOD)
    del members["generation_config.json"]
    message = refused(rebuild(members, rehash=False))
    assert "generation_config.json" in message and "missing" in message
    message = refused(rebuild(members, rehash=True))  # unlisted too: required by the format
    assert "generation_config.json" in message and "required" in message


def test_extra_member_unlisted_and_listed() -> None:
    members = {**members_of(GOOD), "notes.txt": b"hello"}
    message = refused(rebuild(members, rehash=False))
    assert "notes.txt" in message and "not listed" in message
    message = refused(rebuild(members, rehash=True))
    assert "notes.txt" in message and "not part of format v2" in message


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("../evil.txt", "traversal"),
        ("a/../../evil.txt", "traversal"),
        ("/etc/passwd", "absolute"),
        ("C:/evil.txt", "absolute"),
        ("dir\\evil.txt", "backslash"),
        (".hidden", "unsafe name"),
    ],
)
def test_unsafe_member_names(name: str, fragment: str) -> None:
    members = {**members_of(GOOD), name: b"x"}
    message = refused(rebuild(members, rehash=False))
    assert fragment in message and message.startswith("member ")


def test_directory_entry() -> None:
    members = {**members_of(GOOD), "folder/": b""}
    assert "directory" in refused(rebuild(members, rehash=False))


def test_duplicate_member_names() -> None:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(buffer, "w") as zf:
            for name, data in members_of(GOOD).items():
                zf.writestr(name, data)
            zf.writestr("config.json", b"{}")
    message = refused(buffer.getvalue())
    assert "config.json" in message and "twice" in message


def test_manifest_not_first() -> None:
    members = members_of(GOOD)
    reordered = {"config.json": members.pop("config.json"), **members}
    message = refused(rebuild(reordered))
    assert "manifest.json" in message and "first" in message


def test_overlapping_entries() -> None:
    data = bytearray(GOOD)
    struct.pack_into("<I", data, central_entry(GOOD, "config.json") + 42, 0)
    assert "overlaps" in refused(bytes(data))


def test_encrypted_member() -> None:
    message = refused(patch_header(GOOD, "config.json", "flags", 0x1))
    assert "config.json" in message and "encrypted" in message


@pytest.mark.parametrize("method", [12, 14, 99])
def test_unknown_compression(method: int) -> None:
    message = refused(patch_header(GOOD, "README.md", "method", method))
    assert "README.md" in message and f"method {method}" in message


def test_zip64_is_refused() -> None:
    data = bytearray(GOOD)
    end = len(data) - 22
    struct.pack_into("<HH", data, end + 8, 0xFFFF, 0xFFFF)
    assert "zip64" in refused(bytes(data))


# --- limits ---------------------------------------------------------------------------------


def test_crafted_zip_bomb() -> None:
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = bomb.compress(b"\0" * (8 << 20)) + bomb.flush()
    members = members_of(GOOD)
    members["README.md"] = b"\0" * (8 << 20)
    archive = rebuild(members)
    assert len(archive) < len(GOOD) + len(payload) + 1024  # really a bomb: ~8 KiB -> 8 MiB
    message = refused(archive)
    assert "README.md" in message and "compression ratio" in message


def test_total_size_limit() -> None:
    message = refused(GOOD, limits=PackageLimits(max_total_bytes=20_000))
    assert "max_total_bytes" in message


def test_member_count_limit() -> None:
    assert "max_members" in refused(GOOD, limits=PackageLimits(max_members=5))
    members = {**members_of(GOOD), **{f"x{i}.txt": b"x" for i in range(40)}}
    message = refused(rebuild(members, rehash=False))
    assert "46 members" in message and "max_members" in message


def test_archive_size_limit(tmp_path: Path) -> None:
    limits = PackageLimits(max_archive_bytes=10_000)
    assert "max_archive_bytes" in refused(GOOD, limits=limits)
    path = tmp_path / "big.evermind"
    path.write_bytes(GOOD)
    assert "max_archive_bytes" in refused(path, limits=limits)


def test_manifest_and_json_size_limits() -> None:
    message = refused(GOOD, limits=PackageLimits(max_manifest_bytes=100))
    assert "manifest.json" in message and "max_manifest_bytes" in message
    message = refused(GOOD, limits=PackageLimits(max_json_bytes=2000))
    assert "max_json_bytes" in message


def test_safetensors_header_limit() -> None:
    message = refused(GOOD, limits=PackageLimits(max_safetensors_header_bytes=64))
    assert "model.safetensors" in message and "header declares" in message


def test_limits_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_members"):
        PackageLimits(max_members=0)
    with pytest.raises(ConfigError, match="max_compression_ratio"):
        PackageLimits(max_compression_ratio=0.5)


# --- manifest -------------------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(manifest: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = manifest
        for key in parents:
            target = target[key]
        target[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_set("schema", "evermind.package/1"), "'schema'"),
        (_set("name", "../x"), "'name'"),
        (_set("version", 2), "'version'"),
        (_set("created_at", "yesterday"), "'created_at'"),
        (_set("architecture", "transformer"), "'architecture'"),
        (_set("model.d_model", 16), "model.d_model"),
        (_set("model.n_params", 1), "model.n_params"),
        (_set("model.dtype", "float16"), "torch_dtype"),
        (_set("model.extra", 1), "'model'"),
        (_set("tokenizer.vocab_size", 300), "tokenizer.vocab_size"),
        (_set("tokenizer.special_tokens", {}), "tokenizer.special_tokens"),
        (_set("bench.loss", "low"), "'bench'"),
        (_set("training", []), "'training'"),
        (_set("surprise", True), "unknown field"),
        (lambda m: m.pop("producer"), "missing field"),
    ],
)
def test_bad_manifest_fields(edit: Callable[[dict[str, Any]], None], fragment: str) -> None:
    assert fragment in refused(with_manifest(edit, rehash=True))


def test_malformed_files_table() -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["files"]["config.json"] = {"sha256": "ABC", "size": 1}

    message = refused(with_manifest(edit))
    assert "files['config.json'].sha256" in message and "hex" in message


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b'{"schema": "evermind.package/2", "schema": "x"}', "duplicate key"),
        (b"[1, 2]", "top level"),
        (b'{"a": NaN}', "non-finite"),
        (b"\xff\xfe{}", "UTF-8"),
        (b"[" * 5000, "nests"),
        (b"[" * 100 + b"]" * 100, "nests deeper"),
        (b"not json", "invalid JSON"),
    ],
)
def test_manifest_not_parseable(raw: bytes, fragment: str) -> None:
    message = refused(with_member("manifest.json", raw))
    assert "manifest.json" in message and fragment in message


# --- model contents ----------------------------------------------------------------------------


def _weights_with(tensors: dict[str, Tensor], dtype: str = "F32") -> bytes:
    return with_member("model.safetensors", encode_safetensors(tensors, dtype=dtype))


def test_wrong_tensor_shape() -> None:
    tensors = tiny_tensors(tiny_config())
    bad = tensors["backbone.layers.1.mixer.out_proj.weight"]
    tensors["backbone.layers.1.mixer.out_proj.weight"] = Tensor(shape=(16, 8), data=bad.data)
    message = refused(_weights_with(tensors))
    assert "backbone.layers.1.mixer.out_proj.weight" in message
    assert "(16, 8)" in message and "(8, 16)" in message


def test_missing_and_extra_tensor() -> None:
    tensors = tiny_tensors(tiny_config())
    removed = tensors.pop("backbone.layers.0.mixer.D")
    assert "backbone.layers.0.mixer.D" in refused(_weights_with(tensors))
    tensors["backbone.layers.0.mixer.D"] = removed
    tensors["lm_head.weight"] = tensors["backbone.embeddings.weight"]
    assert "lm_head.weight" in refused(_weights_with(tensors))


def test_tensor_dtype_differs_from_package_dtype() -> None:
    message = refused(_weights_with(tiny_tensors(tiny_config()), dtype="F16"))
    assert "model.safetensors" in message and "F16" in message


def test_wrong_vocab_size() -> None:
    message = refused(with_member("tokenizer.json", tiny_tokenizer_json(302).encode()))
    assert "tokenizer.json" in message and "302" in message and "301" in message


def test_tokenizer_ids_outside_the_vocabulary() -> None:
    document = json.loads(tiny_tokenizer_json())
    document["added_tokens"][-1]["id"] = 500
    message = refused(with_member("tokenizer.json", json.dumps(document).encode()))
    assert "tokenizer.json" in message and "500" in message


def test_config_disagrees_with_tensors() -> None:
    config = tiny_config(state_size=8)
    message = refused(with_member("config.json", json.dumps(config).encode()))
    assert "model.safetensors" in message and "(16, 8)" in message


def test_config_not_mamba() -> None:
    config = tiny_config(model_type="gpt2")
    message = refused(with_member("config.json", json.dumps(config).encode()))
    assert "config.json" in message and "model_type" in message


def test_text_members_must_be_utf8() -> None:
    message = refused(with_member("README.md", b"caf\xe9"))
    assert "README.md" in message and "UTF-8" in message


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (GOOD + b"<script>alert(1)</script>", "follow the ZIP's end record"),
        (b"GIF89a" + bytes(64) + GOOD, "prepended data"),
        (b"%PDF-1.4\n" + GOOD + b"\n%%EOF\n", "end record"),
    ],
    ids=["appended", "prepended", "both"],
)
def test_a_polyglot_is_refused(data: bytes, words: str) -> None:
    message = refused(data)
    assert words in message and "exactly one ZIP" in message


def test_more_merges_than_vocabulary_entries_is_refused() -> None:
    from evermind.errors import TokenizerError
    from evermind.tokenizer import Tokenizer

    spec = json.loads(tiny_package_kwargs()["tokenizer_json"])
    spec["model"]["merges"] = spec["model"]["merges"] * (len(spec["model"]["vocab"]) + 1)
    with pytest.raises(TokenizerError, match="at most one merge per vocabulary entry"):
        Tokenizer.from_json(json.dumps(spec))
