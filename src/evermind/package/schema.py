"""What a `.evermind` package must contain: member names, the model config, tensor shapes.

This module owns the shared contract between the model and the package: the Hugging Face
``MambaForCausalLM`` ``config.json`` (built by :func:`make_config`, checked by
:func:`config_dims`; a ``Mamba2ForCausalLM`` one, ``model_type`` "mamba2", is accepted too),
the exact set of tensor names and shapes that config implies (:func:`expected_tensor_shapes`),
and how the tokenizer's vocabulary is counted from a ``tokenizer.json``
(:func:`tokenizer_vocab_size`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evermind.errors import PackageError
from evermind.package.cortex import (
    MOE_ARCHITECTURE,
    MOE_MODEL_TYPE,
    moe_layer_shapes,
    moe_layers,
)
from evermind.package.tensor import Tensor

SCHEMA = "evermind.package/2"
ARCHITECTURE = "mamba"

MANIFEST = "manifest.json"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
GENERATION_CONFIG = "generation_config.json"
README = "README.md"
#: Members every package holds besides the manifest.
REQUIRED_MEMBERS = (CONFIG, GENERATION_CONFIG, README, WEIGHTS, TOKENIZER)

#: Sanity bounds on config values, checked before any shape table is built.
MAX_DIM = 1 << 20
MAX_LAYERS = 512


@dataclass(frozen=True)
class MambaDims:
    """Model dimensions in mamba names, resolved from a ``config.json``."""

    d_model: int
    n_layer: int
    vocab_size: int
    d_state: int
    d_conv: int
    expand: int
    d_inner: int
    dt_rank: int
    use_bias: bool
    use_conv_bias: bool
    tie_word_embeddings: bool
    block: str = "mamba1"  # "mamba2": a Mamba2ForCausalLM config (the fields below are set)
    n_heads: int = 0
    head_dim: int = 0
    n_groups: int = 0
    # The cortex (model_type evermind_mamba_moe): experts, their widths, the layer step.
    moe_experts: int = 0
    moe_intermediate: int = 0
    moe_shared_intermediate: int = 0
    moe_every: int = 1


def make_config(
    *,
    d_model: int,
    n_layer: int,
    vocab_size: int,
    pad_token_id: int | None,
    bos_token_id: int | None,
    eos_token_id: int | None,
    d_state: int = 16,
    d_conv: int = 4,
    expand: int = 2,
    layer_norm_epsilon: float = 1e-5,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Build the ``config.json`` of a Mamba model in ``transformers`` naming.

    Args:
        d_model: Residual width (``hidden_size``).
        n_layer: Number of Mamba blocks (``num_hidden_layers``).
        vocab_size: Tokenizer vocabulary size = embedding rows.
        pad_token_id: Padding token id from the tokenizer, or None.
        bos_token_id: Beginning-of-sequence token id, or None.
        eos_token_id: End-of-sequence token id, or None.
        d_state: SSM state size N (``state_size``).
        d_conv: Depthwise convolution width (``conv_kernel``).
        expand: d_inner = expand * d_model.
        layer_norm_epsilon: RMSNorm epsilon.
        dtype: ``"float32"``, ``"float16"`` or ``"int8"`` (``torch_dtype``; the writer
            overrides it).

    Returns:
        A JSON-typed dict that ``MambaForCausalLM.from_pretrained`` reads.
    """
    config: dict[str, Any] = {
        "architectures": ["MambaForCausalLM"],
        "bos_token_id": bos_token_id,
        "conv_kernel": d_conv,
        "eos_token_id": eos_token_id,
        "expand": expand,
        "hidden_act": "silu",
        "hidden_size": d_model,
        "initializer_range": 0.1,
        "intermediate_size": expand * d_model,
        "layer_norm_epsilon": layer_norm_epsilon,
        "model_type": "mamba",
        "num_hidden_layers": n_layer,
        "pad_token_id": pad_token_id,
        "rescale_prenorm_residual": False,
        "residual_in_fp32": True,
        "state_size": d_state,
        "tie_word_embeddings": True,
        "time_step_floor": 1e-4,
        "time_step_init_scheme": "random",
        "time_step_max": 0.1,
        "time_step_min": 0.001,
        "time_step_rank": math.ceil(d_model / 16),
        "time_step_scale": 1.0,
        "torch_dtype": dtype,
        "use_bias": False,
        "use_cache": True,
        "use_conv_bias": True,
        "vocab_size": vocab_size,
    }
    config_dims(config)  # refuse nonsense early, with the same messages the reader gives
    return config


def _int_field(config: Mapping[str, Any], key: str, upper: int = MAX_DIM) -> int:
    """Read a positive bounded int field of config.json."""
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= upper:
        raise PackageError(
            f"{CONFIG}: field {key!r} must be an int in [1, {upper}], found {value!r}"
        )
    return value


def _bool_field(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """Read an optional bool field of config.json."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise PackageError(f"{CONFIG}: field {key!r} must be true or false, found {value!r}")
    return value


def config_dims(config: Mapping[str, Any]) -> MambaDims:
    """Check a ``config.json`` and resolve its dimensions.

    Args:
        config: The parsed ``config.json`` (Hugging Face ``MambaConfig`` names).

    Returns:
        The dimensions in mamba names.

    Raises:
        PackageError: The config is not a Mamba causal LM config, a field is missing or out
            of range, or derived fields (``intermediate_size``, token ids) disagree.
    """
    if config.get("model_type") == "mamba2":
        return _mamba2_dims(config)
    if config.get("model_type") == MOE_MODEL_TYPE:
        return _cortex_dims(config)
    if config.get("model_type") != "mamba":
        raise PackageError(
            f"{CONFIG}: field 'model_type' must be 'mamba', 'mamba2' or {MOE_MODEL_TYPE!r}, found "
            f"{config.get('model_type')!r}"
        )
    if config.get("architectures") != ["MambaForCausalLM"]:
        raise PackageError(
            f"{CONFIG}: field 'architectures' must be ['MambaForCausalLM'], "
            f"found {config.get('architectures')!r}"
        )
    d_model = _int_field(config, "hidden_size")
    expand = _int_field(config, "expand", 64)
    d_inner = config.get("intermediate_size", expand * d_model)
    if not isinstance(d_inner, int) or isinstance(d_inner, bool) or d_inner != expand * d_model:
        raise PackageError(
            f"{CONFIG}: field 'intermediate_size' must equal expand * hidden_size = "
            f"{expand * d_model}, found {d_inner!r}"
        )
    dt_rank = config.get("time_step_rank", "auto")
    if dt_rank == "auto":
        dt_rank = math.ceil(d_model / 16)
    return _check_token_ids(
        config,
        MambaDims(
            d_model=d_model,
            n_layer=_int_field(config, "num_hidden_layers", MAX_LAYERS),
            vocab_size=_int_field(config, "vocab_size"),
            d_state=_int_field(config, "state_size", 1024),
            d_conv=_int_field(config, "conv_kernel", 64),
            expand=expand,
            d_inner=d_inner,
            dt_rank=_int_field({"time_step_rank": dt_rank}, "time_step_rank"),
            use_bias=_bool_field(config, "use_bias", False),
            use_conv_bias=_bool_field(config, "use_conv_bias", True),
            tie_word_embeddings=_bool_field(config, "tie_word_embeddings", True),
        ),
    )


def _mamba2_dims(config: Mapping[str, Any]) -> MambaDims:
    """:func:`config_dims` of a ``Mamba2ForCausalLM`` config."""
    if config.get("architectures") != ["Mamba2ForCausalLM"]:
        raise PackageError(
            f"{CONFIG}: field 'architectures' must be ['Mamba2ForCausalLM'] for model_type "
            f"'mamba2', found {config.get('architectures')!r}"
        )
    d_model = _int_field(config, "hidden_size")
    expand = _int_field(config, "expand", 64)
    n_heads, head_dim = _int_field(config, "num_heads"), _int_field(config, "head_dim")
    n_groups = _int_field(config, "n_groups")
    if n_heads * head_dim != expand * d_model or n_heads % n_groups:
        raise PackageError(
            f"{CONFIG}: fields 'num_heads' * 'head_dim' must equal expand * hidden_size = "
            f"{expand * d_model} and 'n_groups' divide 'num_heads'; found {n_heads} * "
            f"{head_dim}, n_groups {n_groups}"
        )
    dt_rank = config.get("time_step_rank", "auto")
    if dt_rank == "auto":
        dt_rank = math.ceil(d_model / 16)
    dims = MambaDims(
        d_model=d_model,
        n_layer=_int_field(config, "num_hidden_layers", MAX_LAYERS),
        vocab_size=_int_field(config, "vocab_size"),
        d_state=_int_field(config, "state_size", 1024),
        d_conv=_int_field(config, "conv_kernel", 64),
        expand=expand,
        d_inner=expand * d_model,
        dt_rank=_int_field({"time_step_rank": dt_rank}, "time_step_rank"),
        use_bias=_bool_field(config, "use_bias", False),
        use_conv_bias=_bool_field(config, "use_conv_bias", True),
        tie_word_embeddings=_bool_field(config, "tie_word_embeddings", False),
        block="mamba2",
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=n_groups,
    )
    return _check_token_ids(config, dims)


def _cortex_dims(config: Mapping[str, Any]) -> MambaDims:
    """:func:`config_dims` of an ``evermind_mamba_moe`` config: Mamba-1 plus the cortex."""
    if config.get("architectures") != [MOE_ARCHITECTURE]:
        raise PackageError(
            f"{CONFIG}: field 'architectures' must be [{MOE_ARCHITECTURE!r}] for model_type "
            f"{MOE_MODEL_TYPE!r}, found {config.get('architectures')!r}"
        )
    if config.get("transformers_class", "absent") is not None:
        raise PackageError(
            f"{CONFIG}: field 'transformers_class' must be null for model_type "
            f"{MOE_MODEL_TYPE!r} (no transformers class loads it), found "
            f"{config.get('transformers_class', 'nothing')!r}"
        )
    mamba = config_dims({**config, "model_type": "mamba", "architectures": ["MambaForCausalLM"]})
    experts = _int_field(config, "num_experts", 4096)
    _int_field(config, "num_experts_per_tok", experts)  # its range only: no tensor depends on k
    every = _int_field(config, "decoder_sparse_step", mamba.n_layer)
    return dataclasses.replace(
        mamba,
        moe_experts=experts,
        moe_every=every,
        moe_intermediate=_int_field(config, "moe_intermediate_size"),
        moe_shared_intermediate=_int_field(config, "shared_expert_intermediate_size"),
    )


def _check_token_ids(config: Mapping[str, Any], dims: MambaDims) -> MambaDims:
    """``dims``, once the config's special token ids are null or within the vocabulary."""
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        token_id = config.get(key)
        if token_id is not None and (
            not isinstance(token_id, int)
            or isinstance(token_id, bool)
            or not 0 <= token_id < dims.vocab_size
        ):
            raise PackageError(
                f"{CONFIG}: field {key!r} must be null or an id in [0, {dims.vocab_size}), "
                f"found {token_id!r}"
            )
    return dims


def expected_tensor_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Return every tensor name and shape a ``config.json`` implies.

    Follows ``transformers`` ``MambaForCausalLM``: per layer a norm weight, in_proj,
    depthwise conv1d, x_proj, dt_proj, A_log, D and out_proj; biases only where
    ``use_bias`` / ``use_conv_bias`` say; ``lm_head.weight`` only when embeddings are not
    tied.

    Args:
        config: The parsed ``config.json``.

    Returns:
        Tensor name -> shape (PyTorch weight layout, rows first).

    Raises:
        PackageError: The config is invalid (see :func:`config_dims`).
    """
    dims = config_dims(config)
    if dims.block == "mamba2":
        return _mamba2_shapes(dims)
    d_model, d_inner = dims.d_model, dims.d_inner
    shapes: dict[str, tuple[int, ...]] = {
        "backbone.embeddings.weight": (dims.vocab_size, d_model),
        "backbone.norm_f.weight": (d_model,),
    }
    for layer in range(dims.n_layer):
        prefix = f"backbone.layers.{layer}"
        shapes[f"{prefix}.norm.weight"] = (d_model,)
        shapes[f"{prefix}.mixer.in_proj.weight"] = (2 * d_inner, d_model)
        shapes[f"{prefix}.mixer.conv1d.weight"] = (d_inner, 1, dims.d_conv)
        shapes[f"{prefix}.mixer.x_proj.weight"] = (dims.dt_rank + 2 * dims.d_state, d_inner)
        shapes[f"{prefix}.mixer.dt_proj.weight"] = (d_inner, dims.dt_rank)
        shapes[f"{prefix}.mixer.dt_proj.bias"] = (d_inner,)
        shapes[f"{prefix}.mixer.A_log"] = (d_inner, dims.d_state)
        shapes[f"{prefix}.mixer.D"] = (d_inner,)
        shapes[f"{prefix}.mixer.out_proj.weight"] = (d_model, d_inner)
        if dims.use_conv_bias:
            shapes[f"{prefix}.mixer.conv1d.bias"] = (d_inner,)
        if dims.use_bias:
            shapes[f"{prefix}.mixer.in_proj.bias"] = (2 * d_inner,)
            shapes[f"{prefix}.mixer.out_proj.bias"] = (d_model,)
    cortex = moe_layer_shapes(
        d_model, dims.moe_experts, dims.moe_intermediate, dims.moe_shared_intermediate
    )
    for layer in moe_layers(dims.n_layer, dims.moe_experts, dims.moe_every):
        for suffix, shape in cortex.items():
            shapes[f"backbone.layers.{layer}.{suffix}"] = shape
    if not dims.tie_word_embeddings:
        shapes["lm_head.weight"] = (dims.vocab_size, d_model)
    return shapes


def _mamba2_shapes(dims: MambaDims) -> dict[str, tuple[int, ...]]:
    """:func:`expected_tensor_shapes` of a ``Mamba2ForCausalLM`` config."""
    d_model, d_inner, heads = dims.d_model, dims.d_inner, dims.n_heads
    conv_dim = d_inner + 2 * dims.n_groups * dims.d_state  # x, B and C pass the conv
    shapes: dict[str, tuple[int, ...]] = {
        "backbone.embeddings.weight": (dims.vocab_size, d_model),
        "backbone.norm_f.weight": (d_model,),
    }
    for layer in range(dims.n_layer):
        prefix = f"backbone.layers.{layer}"
        shapes[f"{prefix}.norm.weight"] = (d_model,)
        shapes[f"{prefix}.mixer.in_proj.weight"] = (d_inner + conv_dim + heads, d_model)
        shapes[f"{prefix}.mixer.conv1d.weight"] = (conv_dim, 1, dims.d_conv)
        shapes[f"{prefix}.mixer.dt_bias"] = (heads,)
        shapes[f"{prefix}.mixer.A_log"] = (heads,)
        shapes[f"{prefix}.mixer.D"] = (heads,)
        shapes[f"{prefix}.mixer.norm.weight"] = (d_inner,)
        shapes[f"{prefix}.mixer.out_proj.weight"] = (d_model, d_inner)
        if dims.use_conv_bias:
            shapes[f"{prefix}.mixer.conv1d.bias"] = (conv_dim,)
        if dims.use_bias:
            shapes[f"{prefix}.mixer.in_proj.bias"] = (d_inner + conv_dim + heads,)
            shapes[f"{prefix}.mixer.out_proj.bias"] = (d_model,)
    if not dims.tie_word_embeddings:
        shapes["lm_head.weight"] = (dims.vocab_size, d_model)
    return shapes


def check_tensors(
    tensors: Mapping[str, Tensor], expected: Mapping[str, tuple[int, ...]], *, where: str
) -> None:
    """Refuse tensors whose names or shapes differ from the expected table.

    Args:
        tensors: Name -> tensor (or anything with a ``shape``).
        expected: Name -> shape, from :func:`expected_tensor_shapes`.
        where: Prefix for messages, e.g. ``"model.safetensors"``.

    Raises:
        PackageError: A tensor is missing, unexpected, or has the wrong shape.
    """
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise PackageError(
            f"{where}: missing tensor(s) {missing[:5]}{'...' if len(missing) > 5 else ''} "
            f"that config.json requires"
        )
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise PackageError(
            f"{where}: unexpected tensor(s) {unexpected[:5]}; config.json implies only the "
            "transformers MambaForCausalLM names"
        )
    for name in sorted(expected):
        if tensors[name].shape != expected[name]:
            raise PackageError(
                f"{where}: tensor {name!r} has shape {tensors[name].shape}; config.json "
                f"expects {expected[name]}"
            )


def model_summary(dims: MambaDims, *, n_params: int, dtype: str) -> dict[str, Any]:
    """Return the manifest's ``model`` object for these dimensions.

    Args:
        dims: Resolved dimensions (from :func:`config_dims`).
        n_params: Number of stored parameters (tied weights counted once; int8 scales
            not counted).
        dtype: ``"float32"``, ``"float16"`` or ``"int8"``.

    Returns:
        The JSON-typed summary.
    """
    return {
        "d_conv": dims.d_conv,
        "d_inner": dims.d_inner,
        "d_model": dims.d_model,
        "d_state": dims.d_state,
        "dt_rank": dims.dt_rank,
        "dtype": dtype,
        "expand": dims.expand,
        "n_layer": dims.n_layer,
        "n_params": n_params,
        "vocab_size": dims.vocab_size,
    }


def _is_id(value: Any) -> bool:
    """True for a non-negative int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def tokenizer_vocab_size(tokenizer: Mapping[str, Any]) -> int:
    """Count a Hugging Face ``tokenizer.json`` vocabulary.

    The count is ``len(model.vocab)`` plus the ``added_tokens`` whose id is not already a
    vocab id. Every id must fall in ``[0, count)`` so it indexes an embedding row.

    Args:
        tokenizer: The parsed ``tokenizer.json``.

    Returns:
        The vocabulary size.

    Raises:
        PackageError: ``model.vocab`` or ``added_tokens`` is missing or malformed, or an id
            falls outside the vocabulary.
    """
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids = list(vocab.values())
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids are positions
        ids = list(range(len(vocab)))
    else:
        raise PackageError(
            f"{TOKENIZER}: expected model.vocab to be an object or list, "
            f"found {type(vocab).__name__}"
        )
    if not all(_is_id(token_id) for token_id in ids):
        raise PackageError(f"{TOKENIZER}: model.vocab ids must be non-negative ints")
    known = set(ids)
    added = tokenizer.get("added_tokens", [])
    if not isinstance(added, list) or not all(
        isinstance(token, dict) and _is_id(token.get("id")) for token in added
    ):
        raise PackageError(
            f"{TOKENIZER}: expected added_tokens to be a list of objects with an int 'id'"
        )
    extra = {token["id"] for token in added} - known
    size = len(ids) + len(extra)
    highest = max(known | extra, default=-1)
    if highest >= size:
        raise PackageError(
            f"{TOKENIZER}: token id {highest} is outside the vocabulary of {size} tokens; "
            "expected ids 0..vocab_size-1"
        )
    return size


def tokenizer_summary(tokenizer: Mapping[str, Any]) -> dict[str, Any]:
    """Return the manifest's ``tokenizer`` object for a parsed ``tokenizer.json``.

    Args:
        tokenizer: The parsed ``tokenizer.json``.

    Returns:
        ``{"type": model type, "vocab_size": n, "special_tokens": {content: id}}``.

    Raises:
        PackageError: The tokenizer is malformed (see :func:`tokenizer_vocab_size`).
    """
    vocab_size = tokenizer_vocab_size(tokenizer)
    model_type = tokenizer["model"].get("type")
    if not isinstance(model_type, str) or not model_type:
        raise PackageError(f"{TOKENIZER}: expected model.type to be a string, found {model_type!r}")
    special = {
        token["content"]: token["id"]
        for token in tokenizer.get("added_tokens", [])
        if token.get("special") is True and isinstance(token.get("content"), str)
    }
    return {"special_tokens": special, "type": model_type, "vocab_size": vocab_size}
