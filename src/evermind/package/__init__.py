"""The `.evermind` package format (``evermind.package/2``): write, read, verify.

A package is a ZIP archive: ``manifest.json`` first, then ``README.md``, ``config.json``,
``generation_config.json``, ``model.safetensors`` and ``tokenizer.json`` — a Hugging Face
``MambaForCausalLM`` directory once unzipped (an int8 package's ``config.json`` says that
``transformers`` cannot load it) — and optionally ``embedder.safetensors``, the
embedding head (``head``), ``affect.safetensors``, the affect classifier head
(``affect``), and ``static_embedder.safetensors``, a static embedder the package embeds
with (``static_member``). docs/format.md is the specification.

Browser-safe: everything here is pure standard-library Python. The numpy helper lives in
:mod:`evermind.package.native` (native only) and is not imported here.

Modules: ``tensor`` (the :class:`Tensor` container), ``float16`` (RNE conversion),
``int8`` (per-row int8 weights: the rule, the manifest's ``quantization``),
``safetensors_io``, ``zip_writer``, ``archive`` (safe ZIP opening), ``limits``,
``schema`` (config and tensor contract), ``cortex`` (the MoE cortex's tensor layout),
``head``, ``affect``, ``static_member``, ``manifest``, ``model_card``, ``writer``,
``reader``; native-only: ``native`` (numpy arrays) and ``gguf_export`` (llama.cpp files).
"""

from __future__ import annotations

from evermind.package.affect import AffectHead, affect_scores
from evermind.package.head import EmbedderHead, apply_head
from evermind.package.limits import PackageLimits
from evermind.package.manifest import utc_timestamp
from evermind.package.reader import Package, read_package
from evermind.package.schema import (
    SCHEMA,
    MambaDims,
    config_dims,
    expected_tensor_shapes,
    make_config,
    tokenizer_vocab_size,
)
from evermind.package.tensor import Tensor
from evermind.package.writer import write_file_atomic, write_package, write_package_file

__all__ = [
    "SCHEMA",
    "AffectHead",
    "EmbedderHead",
    "MambaDims",
    "Package",
    "PackageLimits",
    "Tensor",
    "affect_scores",
    "apply_head",
    "config_dims",
    "expected_tensor_shapes",
    "make_config",
    "read_package",
    "tokenizer_vocab_size",
    "utc_timestamp",
    "write_file_atomic",
    "write_package",
    "write_package_file",
]
