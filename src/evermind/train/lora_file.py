"""The adapter file and merging an adapter into a package (native-only, numpy).

This module owns ``<name>.lora.safetensors`` (:data:`ADAPTER_SUFFIX`): ``A`` and ``B`` of
:class:`~evermind.train.lora.LoraAdapter` under PEFT's tensor names, float32::

    base_model.model.backbone.layers.{i}.mixer.{target}.lora_A.weight   (r, in)
    base_model.model.backbone.layers.{i}.mixer.{target}.lora_B.weight   (out, r)

with, in the safetensors metadata, ``format`` (:data:`ADAPTER_FORMAT`), ``rank``, ``alpha``,
``targets`` (a JSON list), ``n_layer``, ``base_digest`` (``sha256:`` of the whole base package
file) and ``base_ref``. :func:`read_adapter` refuses anything else; :func:`check_base`
refuses a base whose digest differs, so an adapter is never applied to a model it was not
trained on. :func:`merge_package` writes ``W + s·B·A`` into an ordinary package — the same
tensor names and shapes — which our reader and ``transformers`` load as they load the base.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np

from evermind.errors import ConfigError, PackageError
from evermind.package import Package, Tensor, utc_timestamp, write_package
from evermind.package.limits import PackageLimits
from evermind.package.safetensors_io import decode_safetensors, encode_safetensors
from evermind.train.lora import LoraAdapter, LoraConfig, merged_params

__all__ = [
    "ADAPTER_FORMAT",
    "ADAPTER_SUFFIX",
    "adapter_bytes",
    "check_base",
    "merge_package",
    "read_adapter",
]

#: The ``format`` written in an adapter file's metadata.
ADAPTER_FORMAT = "evermind.lora/1"
#: How an exported adapter file is named: ``<name>.lora.safetensors``.
ADAPTER_SUFFIX = ".lora.safetensors"
_PEFT_PREFIX = "base_model.model."


def adapter_bytes(adapter: LoraAdapter) -> bytes:
    """The adapter file: ``A`` and ``B`` under PEFT's names, float32, and the metadata."""
    tensors: dict[str, Tensor] = {}
    for name in adapter.A:
        stem = _PEFT_PREFIX + name.removesuffix(".weight")
        for part, value in (("lora_A", adapter.A[name]), ("lora_B", adapter.B[name])):
            flat = array("f", np.ascontiguousarray(value, np.float32).tobytes())
            tensors[f"{stem}.{part}.weight"] = Tensor(tuple(value.shape), flat)
    metadata = {
        "format": ADAPTER_FORMAT,
        "rank": str(adapter.rank),
        "alpha": repr(float(adapter.alpha)),
        "targets": json.dumps(list(adapter.targets)),
        "base_digest": adapter.base_digest,
        "base_ref": adapter.base_ref,
        "n_layer": str(len(adapter.A) // len(adapter.targets)),
    }
    return encode_safetensors(tensors, dtype="F32", metadata=metadata)


def read_adapter(data: bytes, where: str = "adapter") -> LoraAdapter:
    """Reads and checks an adapter file written by :func:`adapter_bytes`.

    Args:
        data: The file's bytes.
        where: What to call it in messages (its path).

    Raises:
        PackageError: It is not an Evermind adapter file, its metadata is missing or
            wrong, or a tensor is missing, extra, misshapen or not finite.
    """
    tensors, meta = decode_safetensors(
        data, member=where, max_header_bytes=PackageLimits().max_safetensors_header_bytes
    )
    if meta.get("format") != ADAPTER_FORMAT:
        raise PackageError(
            f"{where}: metadata format is {meta.get('format')!r}, expected "
            f"{ADAPTER_FORMAT!r}; hint: export the adapter with `evermind adapt "
            "--adapter-out`"
        )
    try:
        config = LoraConfig(
            rank=int(meta["rank"]),
            alpha=float(meta["alpha"]),
            targets=tuple(json.loads(meta["targets"])),
        )
        n_layer = int(meta["n_layer"])
        digest = meta["base_digest"]
    except (KeyError, ValueError, TypeError, ConfigError) as err:
        raise PackageError(
            f"{where}: adapter metadata is incomplete or invalid ({err}); expected rank, "
            "alpha, targets, n_layer and base_digest"
        ) from err
    pairs: dict[str, dict[str, np.ndarray]] = {"lora_A": {}, "lora_B": {}}
    for key, tensor in tensors.items():
        stem, _, part = key.removesuffix(".weight").rpartition(".")
        if not key.startswith(_PEFT_PREFIX) or part not in pairs or len(tensor.shape) != 2:
            raise PackageError(
                f"{where}: unexpected tensor {key!r} {tensor.shape} in an adapter file; "
                "expected 2-D lora_A / lora_B weights only"
            )
        value = np.frombuffer(tensor.to_float32(), np.float32).reshape(tensor.shape)
        if not np.isfinite(value).all():
            raise PackageError(f"{where}: tensor {key!r} holds NaN or infinity")
        pairs[part][stem.removeprefix(_PEFT_PREFIX) + ".weight"] = value.copy()
    A, B = pairs["lora_A"], pairs["lora_B"]
    expected = {
        f"backbone.layers.{i}.mixer.{t}.weight" for i in range(n_layer) for t in config.targets
    }
    if set(A) != expected or set(B) != expected:
        raise PackageError(
            f"{where}: expected lora_A and lora_B for {len(expected)} weights "
            f"({n_layer} layers x {list(config.targets)}), got {len(A)} and {len(B)}"
        )
    for name in expected:
        if A[name].shape[0] != config.rank or B[name].shape[1] != config.rank:
            raise PackageError(
                f"{where}: {name} has lora_A {A[name].shape} and lora_B {B[name].shape}; "
                f"expected (r, in) and (out, r) with r = {config.rank}"
            )
    return LoraAdapter(
        config.rank, config.alpha, config.targets, digest, A, B, meta.get("base_ref", "")
    )


def check_base(adapter: LoraAdapter, package: Package) -> None:
    """Refuses a base other than the one this adapter was trained on.

    Raises:
        PackageError: The package's digest differs from :attr:`base_digest`, or its
            weights do not have the shapes the adapter expects.
    """
    if package.digest != adapter.base_digest:
        raise PackageError(
            f"adapter: trained on {adapter.base_ref or 'another package'} "
            f"({adapter.base_digest[:19]}…), refused on {package.ref} ({package.digest[:19]}…); "
            "hint: an adapter only fits the exact package it was trained on"
        )
    for name in adapter.A:
        shape = package.tensors[name].shape if name in package.tensors else None
        want = (adapter.B[name].shape[0], adapter.A[name].shape[1])
        if shape != want:
            raise PackageError(
                f"adapter: {name} is {shape} in {package.ref}, the adapter needs {want}"
            )


def merge_package(
    base: Package,
    adapter: LoraAdapter,
    *,
    version: str | None = None,
    training: Mapping[str, Any] | None = None,
    created_at: datetime | None = None,
) -> bytes:
    """An ordinary package: ``base`` with the adapter merged into its weights.

    Everything else is the base's — name, config, tokenizer, generation config, the
    embedding head and the storage dtype; the manifest's ``training`` gains an ``adapter``
    entry (rank, alpha, targets, the base digest) plus whatever ``training`` adds.

    Args:
        base: The package the adapter was trained on.
        adapter: The adapter.
        version: The merged package's version (default: the base's).
        training: More fields for the manifest's ``adapter`` entry (JSON-typed).
        created_at: The timestamp written (default: now).

    Raises:
        PackageError: The adapter belongs to another base (:func:`check_base`).
    """
    check_base(adapter, base)
    params = {
        name: np.frombuffer(t.to_float32(), np.float32).reshape(t.shape)
        for name, t in base.tensors.items()
    }
    merged = merged_params(params, adapter)
    tensors = {
        name: Tensor(tuple(value.shape), array("f", value.tobytes()))
        for name, value in merged.items()
    }
    summary = dict(base.manifest.get("training", {}))
    summary["adapter"] = {
        "method": "lora",
        "rank": adapter.rank,
        "alpha": adapter.alpha,
        "targets": list(adapter.targets),
        "base": base.ref,
        "base_digest": base.digest,
        **(training or {}),
    }
    return write_package(
        name=base.name,
        version=version or base.version,
        created_at=utc_timestamp(created_at or datetime.now(UTC)),
        producer=f"{base.manifest.get('producer', 'evermind')} + lora",
        config=base.config,
        tensors=tensors,
        tokenizer_json=base.tokenizer_json,
        training=summary,
        dtype=str(base.manifest["model"]["dtype"]),
        generation_config=base.generation_config,
        embedder=base.embedder,
        static_embedder=base.static_embedder,  # not fitted on the weights: kept
    )
