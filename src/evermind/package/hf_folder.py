"""A Hugging Face model folder back into a `.evermind` package (``evermind import-hf``).

Training can go on past what one machine and numpy do: unzip a package, load it with
``transformers`` (``MambaForCausalLM`` or ``Mamba2ForCausalLM``), train it with
``transformers.Trainer`` (``accelerate launch`` / ``torchrun`` for several GPUs: docs/scale.md),
``trainer.save_model(folder)``, then :func:`import_hf_folder` makes the result a package again.

The folder gives the weights; the *base* package (the one that was unzipped) gives what the
weights do not carry: the package's own ``config.json`` contract, the tokenizer, the
generation config, the name, and the embedding and affect heads. The folder's
``config.json`` must describe the same model (dimensions, layers, vocabulary) as the base's:
fine-tuning changes weights, not shapes. The heads were fitted on the base's weights and are
kept (``keep_heads``), which the summary records so that ``evermind distill-embedder`` can
re-fit them.

Browser-safe: standard library and ``evermind.package`` only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evermind.errors import PackageError
from evermind.package.limits import PackageLimits
from evermind.package.reader import Package
from evermind.package.safetensors_io import decode_safetensors
from evermind.package.schema import check_tensors, config_dims, expected_tensor_shapes
from evermind.package.tensor import Tensor
from evermind.package.writer import write_package

__all__ = ["HfImport", "import_hf_folder", "read_hf_folder"]

#: The weights file ``save_pretrained`` writes, and the index it writes instead when sharded.
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
#: The tied LM head (Mamba ties it to the embeddings): saved by some versions, never stored here.
LM_HEAD = "lm_head.weight"
#: The input embeddings each architecture ties the LM head to.
EMBEDDINGS = ("backbone.embeddings.weight", "backbone.embedding.weight")


@dataclass(frozen=True)
class HfImport:
    """What :func:`import_hf_folder` made.

    Attributes:
        data: The package bytes.
        version: The package's version.
        tensors: How many weight tensors it holds.
        changed: Tensors whose values differ from the base package's.
        kept_heads: The heads carried over from the base (``embedder``, ``affect``).
    """

    data: bytes
    version: str
    tensors: int
    changed: int
    kept_heads: tuple[str, ...]


def _json_file(path: Path, limit: int) -> dict[str, Any]:
    if not path.is_file():
        raise PackageError(
            f"{path.parent}: no {path.name}; expected a Hugging Face model folder "
            "(model.save_pretrained(folder) or trainer.save_model(folder))"
        )
    if path.stat().st_size > limit:
        raise PackageError(f"{path}: {path.stat().st_size} bytes; at most {limit} are read")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PackageError(f"{path}: not JSON ({err})") from err
    if not isinstance(value, dict):
        raise PackageError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _weight_files(folder: Path, limits: PackageLimits) -> list[Path]:
    single = folder / WEIGHTS
    if single.is_file():
        return [single]
    index = folder / WEIGHTS_INDEX
    if index.is_file():
        weight_map = _json_file(index, limits.max_json_bytes).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise PackageError(f"{index}: expected a non-empty 'weight_map' object")
        names = sorted({str(v) for v in weight_map.values()})
        for name in names:
            if "/" in name or "\\" in name or name.startswith("."):
                raise PackageError(f"{index}: shard {name!r} is not a file name in the folder")
        return [folder / name for name in names]
    if any((folder / name).exists() for name in ("pytorch_model.bin", "model.bin")):
        raise PackageError(
            f"{folder}: holds pytorch_model.bin, not {WEIGHTS}; hint: save with "
            "save_pretrained(folder, safe_serialization=True) (transformers' default)"
        )
    raise PackageError(
        f"{folder}: no {WEIGHTS} or {WEIGHTS_INDEX}; expected a Hugging Face model folder "
        "(model.save_pretrained(folder) or trainer.save_model(folder))"
    )


def read_hf_folder(folder: Path, limits: PackageLimits | None = None) -> dict[str, Tensor]:
    """The weight tensors of a ``save_pretrained`` folder (one file or shards), by name.

    Raises:
        PackageError: No weights, a malformed or oversized file, a dtype other than float32
            or float16, or a tensor named twice across shards.
    """
    limits = limits or PackageLimits()
    tensors: dict[str, Tensor] = {}
    total = 0
    for path in _weight_files(Path(folder), limits):
        if not path.is_file():
            raise PackageError(f"{path}: the shard the index names is missing")
        total += path.stat().st_size
        if total > limits.max_total_bytes:
            raise PackageError(
                f"{folder}: the weights exceed {limits.max_total_bytes} bytes, the package limit"
            )
        found, _ = decode_safetensors(
            path.read_bytes(),
            member=path.name,
            max_header_bytes=limits.max_safetensors_header_bytes,
        )
        for name, tensor in found.items():
            if name in tensors:
                raise PackageError(f"{path.name}: tensor {name!r} is in two shards")
            if tensor.dtype not in ("F32", "F16"):
                raise PackageError(
                    f"{path.name}: tensor {name!r} is {tensor.dtype}; expected F32 or F16; "
                    "hint: model.to(torch.float32) before save_pretrained"
                )
            tensors[name] = tensor
    return tensors


def _drop_tied_head(tensors: dict[str, Tensor], expected: Mapping[str, Any]) -> None:
    head = tensors.get(LM_HEAD)
    if head is None or LM_HEAD in expected:
        return
    embedding = next((tensors[name] for name in EMBEDDINGS if name in tensors), None)
    if (
        embedding is None
        or head.shape != embedding.shape
        or head.to_float32() != (embedding.to_float32())
    ):
        raise PackageError(
            f"{WEIGHTS}: {LM_HEAD} differs from the embeddings; this model ties its LM head "
            "to them (tie_word_embeddings), so an untied head cannot be stored; hint: keep "
            "tie_word_embeddings true while training"
        )
    del tensors[LM_HEAD]


def import_hf_folder(
    folder: str | Path,
    base: Package,
    *,
    version: str | None = None,
    created_at: str,
    producer: str,
    keep_heads: bool = True,
    limits: PackageLimits | None = None,
) -> HfImport:
    """A `.evermind` package of ``folder``'s weights on ``base``'s tokenizer and contract.

    Args:
        folder: What ``save_pretrained`` / ``Trainer.save_model`` wrote.
        base: The package the folder's model was unzipped from.
        version: The new package's version; default: the base's with ``+hf``.
        created_at: ISO-8601 UTC timestamp (:func:`evermind.package.utc_timestamp`).
        producer: What imported it, for the manifest.
        keep_heads: Carry the base's embedding and affect heads (fitted on its weights). A
            static embedder (not fitted on the weights) is always carried.
        limits: The reader's bounds, applied to the folder's files too.

    Raises:
        PackageError: The folder is not a model folder, describes another model than the
            base (a dimension, layer count or vocabulary differs), or its tensors do not
            match the base's names and shapes.
    """
    folder = Path(folder)
    limits = limits or PackageLimits()
    if not folder.is_dir():
        raise PackageError(f"{folder}: not a folder; expected a Hugging Face model folder")
    hf_config = _json_file(folder / "config.json", limits.max_json_bytes)
    try:
        theirs = config_dims(hf_config)
    except PackageError as err:
        raise PackageError(f"{folder / 'config.json'}: {err}") from err
    ours = config_dims(base.config)
    if theirs != ours:
        diff = {
            k: (getattr(ours, k), getattr(theirs, k))
            for k in ours.__dataclass_fields__
            if getattr(ours, k) != getattr(theirs, k)
        }
        raise PackageError(
            f"{folder / 'config.json'} describes another model than {base.ref}: "
            + ", ".join(f"{k} {a} in the package, {b} in the folder" for k, (a, b) in diff.items())
            + "; fine-tuning changes weights, not shapes"
        )
    tensors = read_hf_folder(folder, limits)
    expected = expected_tensor_shapes(base.config)
    _drop_tied_head(tensors, expected)
    check_tensors(tensors, expected, where=f"{folder.name}/{WEIGHTS}")
    changed = sum(
        1
        for name, tensor in tensors.items()
        if tensor.to_float32() != base.tensors[name].to_float32()
    )
    manifest = base.manifest
    training = dict(manifest["training"]) if isinstance(manifest["training"], dict) else {}
    training["continued"] = {
        "with": "transformers",
        "transformers_version": str(hf_config.get("transformers_version", "unknown")),
        "from_version": base.version,
        "tensors_changed": changed,
        "heads": "kept from the base (fitted on its weights)" if keep_heads else "dropped",
    }
    new_version = version or f"{base.version}+hf"
    data = write_package(
        name=base.name,
        version=new_version,
        created_at=created_at,
        producer=producer,
        config=base.config,
        tensors=tensors,
        tokenizer_json=base.tokenizer_json,
        training=training,
        bench={},  # the base's numbers describe the base's weights
        dtype="float32",
        generation_config=base.generation_config,
        embedder=base.embedder if keep_heads else None,
        affect=base.affect if keep_heads else None,
        static_embedder=base.static_embedder,  # not fitted on the weights: always kept
    )
    heads = tuple(
        name
        for name, head in (("embedder", base.embedder), ("affect", base.affect))
        if keep_heads and head is not None
    )
    return HfImport(data, new_version, len(tensors), changed, heads)
