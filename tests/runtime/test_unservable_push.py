"""A push is refused unless the package can be served: nothing installs that then 500s.

Each package here reads as a valid archive (digests, shapes and JSON all fine) but breaks
something serving reads: a config field, the tokenizer's merges or pre-tokenizer, a weight.
The push must answer 400 naming the part, install nothing, and leave the server serving.
"""

from __future__ import annotations

import json
import math
from array import array
from typing import Any

import httpx
import pytest

from evermind.package import Package, Tensor, read_package, write_package
from tests.factories import tiny_package
from tests.runtime.helpers import assert_error, model_ids


def _base() -> Package:
    return read_package(tiny_package("unservable", "1.0.0"))


def _rebuild(package: Package, **changes: Any) -> bytes:
    parts: dict[str, Any] = {
        "config": package.config,
        "tensors": package.tensors,
        "tokenizer_json": package.tokenizer_json,
    }
    parts.update(changes)
    return write_package(
        name="unservable",
        version="1.0.0",
        created_at="2026-01-01T00:00:00Z",
        producer="tests",
        **parts,
    )


def _config(**fields: Any) -> dict[str, Any]:
    package = _base()
    return {"config": {**package.config, **fields}}


def _tokenizer(edit: Any) -> dict[str, Any]:
    spec = json.loads(_base().tokenizer_json)
    edit(spec)
    return {"tokenizer_json": json.dumps(spec)}


def _nan_weight() -> dict[str, Any]:
    package = _base()
    name = "backbone.embeddings.weight"
    values = array("f", package.tensors[name].to_float32())
    values[0] = math.nan
    return {"tensors": {**package.tensors, name: Tensor(package.tensors[name].shape, values)}}


CASES = {
    "layer_norm_epsilon": (lambda: _config(layer_norm_epsilon="x"), "rms_eps"),
    "hidden_act": (lambda: _config(hidden_act="gelu"), "hidden_act"),
    "integer merges": (
        lambda: _tokenizer(lambda s: s["model"].update(merges=[[1, 2], *s["model"]["merges"]])),
        "merges[0]",
    ),
    "unknown merge": (
        lambda: _tokenizer(
            lambda s: s["model"].update(merges=[["zzq", "qqz"], *s["model"]["merges"]])
        ),
        "missing from the vocab",
    ),
    "pre-tokenizer": (
        lambda: _tokenizer(lambda s: s.update(pre_tokenizer={"type": "Whitespace"})),
        "pre_tokenizer",
    ),
    "non-finite weight": (_nan_weight, "backbone.embeddings.weight"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_unservable_package_is_refused_naming_the_part(alpha: httpx.Client, case: str) -> None:
    changes, named = CASES[case]
    data = _rebuild(_base(), **changes())
    read_package(data)  # the archive itself is valid: only serving it would fail
    message = assert_error(alpha.post("/v1/models", content=data), 400, "invalid_package")
    assert "cannot be served" in message and named in message, message
    assert "evermind/unservable:1.0.0" not in model_ids(alpha)


def test_a_servable_push_still_serves_at_once(alpha: httpx.Client) -> None:
    assert alpha.post("/v1/models", content=_rebuild(_base())).status_code == 201
    body = {"model": "evermind/unservable:1.0.0", "prompt": "The", "max_tokens": 2}
    assert alpha.post("/v1/completions", json=body).status_code == 200
