"""Writing `.evermind` packages: bytes in memory or an atomically replaced file.

This module owns the writer's side of the format: it checks the caller's model against
the shared contract (tensor names and shapes from ``config.json``, tokenizer vocabulary
= ``vocab_size`` = embedding rows) before writing anything, encodes the tensors
(float32, round-to-nearest-even float16, or int8 per-row projections beside float32
everything else: :mod:`evermind.package.int8`), renders the JSON members canonically and the
model card, and assembles the ZIP with :mod:`evermind.package.zip_writer`. Same inputs
always give the same bytes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from evermind.errors import PackageError
from evermind.package._json import dumps_canonical, loads_object
from evermind.package.affect import AFFECT_MEMBER, AffectHead
from evermind.package.head import HEAD_MEMBER, EmbedderHead
from evermind.package.int8 import (
    INT8_EMBEDDING,
    choose_tensors,
    describe,
    quantization_config,
    quantize_row_values,
    scale_name,
)
from evermind.package.manifest import DTYPES, build_manifest, check_json_typed
from evermind.package.model_card import render_model_card
from evermind.package.safetensors_io import encode_safetensors
from evermind.package.schema import (
    CONFIG,
    GENERATION_CONFIG,
    MANIFEST,
    README,
    TOKENIZER,
    WEIGHTS,
    check_tensors,
    config_dims,
    expected_tensor_shapes,
    model_summary,
    tokenizer_summary,
    tokenizer_vocab_size,
)
from evermind.package.static_member import STATIC_MEMBER, StaticEmbedderFile
from evermind.package.tensor import TORCH_TO_DTYPE, Tensor
from evermind.package.zip_writer import ZipMember, build_zip

logger = logging.getLogger(__name__)

#: Data alignment of the STOREd safetensors member inside the archive (bytes).
WEIGHTS_ALIGNMENT = 64


def default_generation_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``generation_config.json`` used when the caller gives none.

    Args:
        config: The model's ``config.json``.

    Returns:
        The special token ids, as ``transformers`` writes them by default.
    """
    return {key: config.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")}


def _quantize(tensor: Tensor, name: str) -> Tensor:
    """The int8 form of a 2-D tensor (kept as it is when it already is int8)."""
    if tensor.dtype == "I8" and tensor.scale is not None:
        return tensor
    rows, cols = tensor.shape
    data, scales = quantize_row_values(tensor.to_float32(), rows, cols, name=name)
    return Tensor(tensor.shape, data, "I8", scale=Tensor((rows,), scales))


def _storage(
    tensors: Mapping[str, Tensor], dtype: str, int8_embedding: bool
) -> tuple[dict[str, Tensor], dict[str, str], list[str]]:
    """What ``model.safetensors`` holds: (name -> tensor, name -> safetensors dtype, the
    names stored as int8). Float packages store every tensor as their dtype; int8 ones
    store the chosen 2-D weights as ``I8`` plus ``<name>_scale`` and the rest as ``F32``."""
    if dtype != "int8":
        return dict(tensors), dict.fromkeys(tensors, TORCH_TO_DTYPE[dtype]), []
    chosen = choose_tensors(list(tensors), embedding=int8_embedding)
    stored: dict[str, Tensor] = {}
    dtypes: dict[str, str] = {}
    for name, tensor in tensors.items():
        if name in chosen:
            quantised = _quantize(tensor, name)
            assert quantised.scale is not None
            stored[name], dtypes[name] = quantised, "I8"
            stored[scale_name(name)], dtypes[scale_name(name)] = quantised.scale, "F32"
        else:
            stored[name], dtypes[name] = tensor, "F32"
    return stored, dtypes, chosen


def _file_entry(data: bytes) -> dict[str, Any]:
    """Return the manifest ``files`` entry for a member's contents."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def write_package(
    *,
    name: str,
    version: str,
    created_at: str,
    producer: str,
    config: Mapping[str, Any],
    tensors: Mapping[str, Tensor],
    tokenizer_json: str,
    training: Mapping[str, Any] | None = None,
    bench: Mapping[str, float] | None = None,
    dtype: str = "float32",
    generation_config: Mapping[str, Any] | None = None,
    readme: str | None = None,
    embedder: EmbedderHead | None = None,
    int8_embedding: bool = INT8_EMBEDDING,
    affect: AffectHead | None = None,
    static_embedder: StaticEmbedderFile | None = None,
) -> bytes:
    """Build a `.evermind` package in memory.

    Args:
        name: Package name (``[a-z0-9._-]``, at most 64), served as ``evermind/<name>:<version>``.
        version: Package version, e.g. ``"1.0.0"``.
        created_at: ISO-8601 UTC timestamp chosen by the caller, e.g. ``"2025-01-31T12:00:00Z"``
            (see :func:`evermind.package.manifest.utc_timestamp`); never read from the clock.
        producer: What wrote the package, e.g. ``"evermind 0.1.0 (pyodide)"``.
        config: The ``config.json`` (see :func:`evermind.package.schema.make_config`); its
            ``torch_dtype`` is set to `dtype`.
        tensors: Tensor name -> :class:`Tensor`, exactly the set the config implies.
        tokenizer_json: Hugging Face ``tokenizer.json`` text, stored as given.
        training: Free-form JSON-typed training summary (steps, tokens, corpus, loss...).
        bench: Metric name -> number.
        dtype: Storage dtype of the weights: ``"float32"``, ``"float16"``, or ``"int8"``
            (the block projections int8 per row, the rest float32; config.json then says
            ``torch_dtype: "int8"`` and names ``quantization_config``, and ``transformers``
            refuses to load it).
        generation_config: ``generation_config.json``; default: the config's token ids.
        readme: Model card text; default: :func:`render_model_card` of the manifest.
        embedder: The embedding head, stored as ``embedder.safetensors`` (float32) and
            described by the manifest's ``embedder`` field; None: no head.
        int8_embedding: With ``dtype="int8"``, also store the embedding (the tied LM head)
            as int8 (see :data:`evermind.package.int8.INT8_EMBEDDING` for the default).
        affect: The affect head, stored as ``affect.safetensors`` (float32) and described by
            the manifest's ``affect`` field; None: no affect head.
        static_embedder: A static embedder's file, stored as ``static_embedder.safetensors``
            byte for byte and described by the manifest's ``static_embedder`` field; a
            loaded package then embeds with it. None: none.

    Returns:
        The archive bytes.

    Raises:
        PackageError: Any input breaks the format (names, shapes, vocab size, timestamps,
            non-JSON values, float16 overflow, a non-finite weight to quantise); the
            message names the field or tensor.
    """
    if dtype not in DTYPES:
        raise PackageError(
            f"dtype {dtype!r} is not supported; expected one of {list(DTYPES)}. "
            "Hint: int8 quantises the projections, float16 halves every tensor"
        )
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    # int8: torch_dtype says so, and transformers refuses to build the model under it
    # (docs/format.md, "int8 weights") instead of copying int8 values into float weights.
    config["torch_dtype"] = dtype
    check_json_typed(config, "config")
    dims = config_dims(config)
    check_tensors(tensors, expected_tensor_shapes(config), where=WEIGHTS)
    storage, stored_dtypes, quantised = _storage(tensors, dtype, int8_embedding)
    quantization = describe(quantised) if dtype == "int8" else None
    if quantization is not None:
        config["quantization_config"] = quantization_config(quantization)
    tokenizer = loads_object(tokenizer_json, member=TOKENIZER)
    token_count = tokenizer_vocab_size(tokenizer)
    if token_count != dims.vocab_size:
        raise PackageError(
            f"{TOKENIZER}: vocabulary has {token_count} tokens but config.json vocab_size is "
            f"{dims.vocab_size}; expected them equal (they size the embedding)"
        )
    generation = dict(generation_config or default_generation_config(config))
    check_json_typed(generation, "generation_config")
    weights = encode_safetensors(storage, dtype=stored_dtypes, metadata={"format": "pt"})
    del storage
    try:
        tokenizer_bytes = tokenizer_json.encode("utf-8")
    except UnicodeEncodeError as err:
        raise PackageError(f"{TOKENIZER}: text is not encodable as UTF-8 ({err})") from err
    summary: dict[str, Any] = {
        "name": name,
        "version": version,
        "created_at": created_at,
        "producer": producer,
        "model": model_summary(dims, n_params=sum(t.numel for t in tensors.values()), dtype=dtype),
        "tokenizer": tokenizer_summary(tokenizer),
        "training": dict(training or {}),
        "bench": dict(bench or {}),
    }
    card = (
        readme
        if readme is not None
        else render_model_card(build_manifest(**summary, files={}, quantization=quantization))
    )
    try:
        card_bytes = card.encode("utf-8")
    except UnicodeEncodeError as err:
        raise PackageError(f"{README}: text is not encodable as UTF-8 ({err})") from err
    members = {
        CONFIG: dumps_canonical(config, member=CONFIG),
        GENERATION_CONFIG: dumps_canonical(generation, member=GENERATION_CONFIG),
        README: card_bytes,
        TOKENIZER: tokenizer_bytes,
        WEIGHTS: weights,
    }
    if embedder is not None:
        if embedder.d_model != dims.d_model:
            raise PackageError(
                f"{HEAD_MEMBER}: the head takes {embedder.d_model} values but d_model is "
                f"{dims.d_model}"
            )
        if embedder.tokens is not None and embedder.vocab != dims.vocab_size:
            raise PackageError(
                f"{HEAD_MEMBER}: the head's token table has {embedder.vocab} rows but "
                f"vocab_size is {dims.vocab_size}"
            )
        members[HEAD_MEMBER] = encode_safetensors(embedder.tensors(), dtype="F32")
    if affect is not None:
        if affect.d_model != dims.d_model:
            raise PackageError(
                f"{AFFECT_MEMBER}: the affect head takes {affect.d_model} values but d_model "
                f"is {dims.d_model}"
            )
        members[AFFECT_MEMBER] = encode_safetensors(affect.tensors(), dtype="F32")
    if static_embedder is not None:
        members[STATIC_MEMBER] = static_embedder.data
    manifest = build_manifest(
        **summary,
        files={key: _file_entry(value) for key, value in members.items()},
        embedder=embedder.describe() if embedder is not None else None,
        quantization=quantization,
        affect=affect.describe() if affect is not None else None,
        static_embedder=(static_embedder.describe() if static_embedder is not None else None),
    )
    entries = [ZipMember(MANIFEST, dumps_canonical(manifest, member=MANIFEST), compress=True)]
    for member in sorted(members):
        stored = member in (WEIGHTS, HEAD_MEMBER, AFFECT_MEMBER, STATIC_MEMBER)
        entries.append(
            ZipMember(
                member,
                members[member],
                compress=not stored,
                align=WEIGHTS_ALIGNMENT if stored else 1,
            )
        )
    archive = build_zip(entries)
    logger.debug("wrote package %s:%s (%d bytes)", name, version, len(archive))
    return archive


def write_package_file(
    path: str | os.PathLike[str],
    *,
    name: str,
    version: str,
    created_at: str,
    producer: str,
    config: Mapping[str, Any],
    tensors: Mapping[str, Tensor],
    tokenizer_json: str,
    training: Mapping[str, Any] | None = None,
    bench: Mapping[str, float] | None = None,
    dtype: str = "float32",
    generation_config: Mapping[str, Any] | None = None,
    readme: str | None = None,
    embedder: EmbedderHead | None = None,
    int8_embedding: bool = INT8_EMBEDDING,
    affect: AffectHead | None = None,
    static_embedder: StaticEmbedderFile | None = None,
) -> str:
    """Write a package to `path` atomically (temp file, fsync, rename).

    A reader never sees a half-written file: the bytes go to a temporary file in the same
    directory, are flushed and fsynced, and the file is renamed over `path`.

    Args:
        path: Destination file; its directory must exist.
        name: See :func:`write_package`, as are all the other keyword arguments.
        version: Package version.
        created_at: ISO-8601 UTC timestamp.
        producer: What wrote the package.
        config: The ``config.json``.
        tensors: Tensor name -> :class:`Tensor`.
        tokenizer_json: Hugging Face ``tokenizer.json`` text.
        training: Training summary.
        bench: Metric name -> number.
        dtype: ``"float32"``, ``"float16"`` or ``"int8"``.
        generation_config: ``generation_config.json``.
        readme: Model card text.
        embedder: The embedding head (see :func:`write_package`).
        int8_embedding: See :func:`write_package`.
        affect: The affect head (see :func:`write_package`).
        static_embedder: A static embedder's file (see :func:`write_package`).

    Returns:
        The package digest, ``"sha256:<hex>"`` of the file.

    Raises:
        PackageError: The inputs are invalid (see :func:`write_package`) or the file
            cannot be written; nothing is left behind on failure.
    """
    archive = write_package(
        name=name,
        version=version,
        created_at=created_at,
        producer=producer,
        config=config,
        tensors=tensors,
        tokenizer_json=tokenizer_json,
        training=training,
        bench=bench,
        dtype=dtype,
        generation_config=generation_config,
        readme=readme,
        embedder=embedder,
        int8_embedding=int8_embedding,
        affect=affect,
        static_embedder=static_embedder,
    )
    return write_file_atomic(path, archive)


def write_file_atomic(path: str | os.PathLike[str], data: bytes) -> str:
    """Write package bytes (or any bytes) to `path` atomically (temp file, fsync, rename).

    Args:
        path: Destination file; its directory must exist.
        data: The bytes, e.g. from :func:`write_package` or a package made in the browser.

    Returns:
        ``"sha256:<hex>"`` of the bytes.

    Raises:
        PackageError: The file cannot be written; nothing is left behind on failure.
    """
    archive = data
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    try:
        handle, temp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".evermind", dir=directory)
    except OSError as err:
        raise PackageError(f"cannot create a temporary file in {directory!r}: {err}") from err
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(archive)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp_path, 0o644)
        os.replace(temp_path, target)
    except OSError as err:
        try:
            os.unlink(temp_path)
        except OSError:
            logger.warning("could not remove temporary file %s", temp_path)
        raise PackageError(f"cannot write package to {target!r}: {err}") from err
    _fsync_directory(directory)
    return "sha256:" + hashlib.sha256(archive).hexdigest()


def _fsync_directory(directory: str) -> None:
    """Persist the rename itself where the platform allows opening directories."""
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    try:
        descriptor = os.open(directory, os.O_RDONLY | flags)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        logger.debug("fsync of directory %s is not supported here", directory)
    finally:
        os.close(descriptor)
