"""A pushed int8 package is served on its int8 weights: the server's greedy completion and
embeddings equal the same package loaded in-process."""

from __future__ import annotations

import httpx
import numpy as np

import evermind
from evermind.job import convert_package
from evermind.model.quantize import QuantizedRows
from evermind.package import read_package
from tests.factories import tiny_package


def test_push_and_generate_with_an_int8_package(alpha: httpx.Client) -> None:
    package = convert_package(read_package(tiny_package("quantised", "1.0.0")), "int8")
    pushed = alpha.post(
        "/v1/models", content=package, headers={"Content-Type": "application/octet-stream"}
    )
    assert pushed.status_code == 201, pushed.text
    reference = evermind.load(package)
    assert isinstance(reference.cpu.params["backbone.embeddings.weight"], QuantizedRows)
    card = alpha.get("/v1/models/evermind/quantised:1.0.0").json()
    assert card["manifest"]["model"]["dtype"] == "int8"

    body = {"model": "evermind/quantised:1.0.0", "prompt": "The quick", "max_tokens": 12}
    done = alpha.post("/v1/completions", json={**body, "temperature": 0})
    assert done.status_code == 200, done.text
    expected = reference.complete("The quick", max_new_tokens=12, temperature=0, top_k=None)
    assert done.json()["choices"][0]["text"] == expected.text

    texts = ["remember the fox", "a state space model"]
    embedded = alpha.post("/v1/embeddings", json={"model": "evermind/quantised", "input": texts})
    assert embedded.status_code == 200, embedded.text
    vectors = np.array([d["embedding"] for d in embedded.json()["data"]])
    np.testing.assert_allclose(vectors, reference.embed(texts), rtol=1e-5, atol=1e-6)
    assert alpha.delete("/v1/models/evermind/quantised:1.0.0").status_code == 200
