"""Our pure-Python safetensors against the `safetensors` library, both ways, and header checks."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from array import array
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from evermind.errors import PackageError
from evermind.package import write_package
from evermind.package.safetensors_io import decode_safetensors, encode_safetensors
from evermind.package.tensor import Tensor
from tests.unit.test_package_support import tiny_config, tiny_package_kwargs, tiny_tensors

HEADER_CAP = 1 << 20


def craft(header: dict[str, object], payload: bytes, pad: bytes = b"") -> bytes:
    """A safetensors file from a header dict and raw data, no checks."""
    raw = json.dumps(header).encode() + pad
    return struct.pack("<Q", len(raw)) + raw + payload


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_our_files_load_in_the_safetensors_library(dtype: str) -> None:
    tensors = tiny_tensors(tiny_config())
    loaded = st_load(encode_safetensors(tensors, dtype=dtype, metadata={"format": "pt"}))
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        want = np.asarray(tensor.data, dtype=np.float32).reshape(tensor.shape)
        if dtype == "F16":
            want = want.astype(np.float16)
        assert loaded[name].dtype == want.dtype
        np.testing.assert_array_equal(loaded[name], want, err_msg=name)


def test_package_member_loads_in_the_safetensors_library() -> None:
    archive = write_package(**tiny_package_kwargs(dtype="float16"))
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        loaded = st_load(zf.read("model.safetensors"))
    assert loaded["backbone.embeddings.weight"].shape == (301, 8)
    assert loaded["backbone.layers.1.mixer.conv1d.weight"].dtype == np.float16


@pytest.mark.parametrize("np_dtype", [np.float32, np.float16])
def test_library_files_load_here(np_dtype: type) -> None:
    rng = np.random.default_rng(7)
    arrays: dict[str, Any] = {
        "b.weight": rng.standard_normal((5, 3)).astype(np_dtype),
        "a.bias": rng.standard_normal(7).astype(np_dtype),
        "c.conv": rng.standard_normal((4, 1, 3)).astype(np_dtype),
    }
    tensors, metadata = decode_safetensors(
        st_save(arrays, metadata={"format": "pt"}), max_header_bytes=HEADER_CAP
    )
    assert metadata == {"format": "pt"}
    for name, array_ in arrays.items():
        got = np.asarray(tensors[name].to_float32(), dtype=np.float32).reshape(tensors[name].shape)
        np.testing.assert_array_equal(got, array_.astype(np.float32), err_msg=name)


def test_header_is_sorted_compact_and_aligned() -> None:
    tensors = {
        "z": Tensor(shape=(1,), data=array("f", [1.0])),
        "a": Tensor(shape=(2,), data=array("f", [2.0, 3.0])),
    }
    data = encode_safetensors(tensors, dtype="F32", metadata={"format": "pt"})
    (size,) = struct.unpack_from("<Q", data)
    header = data[8 : 8 + size]
    assert (8 + size) % 8 == 0
    text = header.rstrip(b" ").decode()
    assert " " not in text
    assert list(json.loads(text)) == ["__metadata__", "a", "z"]
    assert json.loads(text)["a"]["data_offsets"] == [0, 8]
    assert encode_safetensors(tensors, dtype="F32", metadata={"format": "pt"}) == data


ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\x01\x00", "too short"),
        (struct.pack("<Q", HEADER_CAP + 1) + b"{}", "limit is"),
        (struct.pack("<Q", 100) + b"{}", "truncated"),
        (struct.pack("<Q", 2) + b"[]", "start with"),
        (craft({"w": {**ENTRY, "dtype": "I64"}}, b"\0" * 8), "I64"),
        (craft({"w": {**ENTRY, "shape": [3]}}, b"\0" * 8), "span 8 bytes"),
        (craft({"w": ENTRY, "v": {**ENTRY, "data_offsets": [4, 12]}}, b"\0" * 12), "overlaps"),
        (craft({"w": {**ENTRY, "data_offsets": [4, 12]}}, b"\0" * 12), "leaves a gap"),
        (craft({"w": ENTRY}, b"\0" * 4), "truncated"),
        (craft({"w": ENTRY}, b"\0" * 12), "trailing"),
        (craft({"w": {**ENTRY, "data_offsets": [8, 0]}}, b"\0" * 8), "data_offsets"),
        (craft({"w": {**ENTRY, "extra": 1}}, b"\0" * 8), "exactly dtype"),
        (craft({"w": {**ENTRY, "shape": [True, 2]}}, b"\0" * 8), "shape"),
        (craft({"__metadata__": {"a": 1}}, b""), "__metadata__"),
        (struct.pack("<Q", 20) + b'{"a":{},"a":{}}     ', "duplicate key"),
        (struct.pack("<Q", 4) + b"{\xff}}", "UTF-8"),
    ],
)
def test_decode_refuses_malformed_files(data: bytes, fragment: str) -> None:
    with pytest.raises(PackageError, match=fragment):
        decode_safetensors(data, max_header_bytes=HEADER_CAP)
