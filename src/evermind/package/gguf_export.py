"""GGUF export: a `.evermind` package as a file llama.cpp loads (native-only: gguf, numpy).

``evermind export --format gguf`` writes one GGUF file with PyPI's ``gguf`` (the writer
llama.cpp's own converter uses), following what llama.cpp's ``convert_hf_to_gguf.py`` does
for the same Hugging Face checkpoints:

- Mamba-1 packages become architecture ``mamba``, Mamba-2 packages ``mamba2``; tensor names
  come from ``gguf``'s tensor-name map for the architecture (``backbone.layers.0.mixer.in_proj``
  → ``blk.0.ssm_in`` …);
- ``A_log`` is stored as ``A = -exp(A_log)``, the conv weight (C, 1, K) as (C, K); for
  Mamba-2, ``dt_bias`` is ``ssm_dt.bias``, A and D are (H, 1) and the gated norm's weight is
  (n_groups, d_inner / n_groups);
- the LM head is tied, so no ``output`` tensor is written (llama.cpp then reuses
  ``token_embd``);
- the tokenizer is written as a GPT-2 style byte-level BPE (``tokenizer.ggml.model =
  "gpt2"``): the vocabulary in id order, the merges, the special tokens typed as control
  tokens, BOS / EOS / PAD ids.

What llama.cpp does not share with us, stated rather than hidden: its GPT-2 pre-tokeniser
splits text a little differently from Evermind's (ours keeps combining marks with letters and
cuts digit runs into threes), so text with such runs may tokenize to other ids there; token
ids fed directly give the same logits (``tests/unit/test_gguf_export.py``). int8 packages are
written dequantised (float32 or float16 tensors: GGUF's own 8-bit formats quantise by blocks of
32, not per row), and a package with a mixture-of-experts cortex or any other block llama.cpp
has no architecture for is refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

from evermind.errors import ConfigError, PackageError
from evermind.package.native import tensors_as_numpy
from evermind.package.reader import Package

__all__ = ["GGUF_DTYPES", "export_gguf"]

#: The tensor types a GGUF export can be written in.
GGUF_DTYPES = ("float32", "float16")

#: What llama.cpp calls each of our package's ``config.json`` ``model_type`` values.
_ARCHES = {"mamba": gguf.MODEL_ARCH.MAMBA, "mamba2": gguf.MODEL_ARCH.MAMBA2}

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
_NORMAL, _CONTROL = 1, 3


def export_gguf(
    package: Package, out: str | os.PathLike[str], dtype: str = "float32"
) -> dict[str, Any]:
    """Writes ``package`` as a GGUF file at ``out`` (atomically: a temporary file, then a rename).

    Args:
        package: A verified package (:func:`evermind.package.read_package`).
        out: The ``.gguf`` path to write; its directory must exist.
        dtype: ``"float32"`` (every tensor F32) or ``"float16"`` (the 2-D projections and the
            embedding F16, the norms, conv, A, D and biases F32, as llama.cpp's converter).

    Returns:
        A summary: ``arch``, ``dtype``, ``tensors`` (count), ``bytes``, ``out``.

    Raises:
        ConfigError: ``dtype`` is not one of :data:`GGUF_DTYPES`, or the package's block has no
            llama.cpp architecture.
        PackageError: The package's tokenizer does not cover its vocabulary.
    """
    if dtype not in GGUF_DTYPES:
        raise ConfigError(
            f"export_gguf: dtype must be one of {list(GGUF_DTYPES)}, got {dtype!r}; hint: int8 "
            "packages are written dequantised, pass float32 or float16"
        )
    config = package.config
    model_type = str(config.get("model_type"))
    if model_type not in _ARCHES:
        raise ConfigError(
            f"export_gguf: {package.ref} has model_type {model_type!r}, which llama.cpp has no "
            f"architecture for (GGUF export supports {sorted(_ARCHES)}); hint: export it as "
            "a .evermind package and serve it with `evermind serve`"
        )
    arch = _ARCHES[model_type]
    arch_name = gguf.MODEL_ARCH_NAMES[arch]
    n_layer = int(config["num_hidden_layers"])
    tensors = _gguf_tensors(package, arch, config, n_layer)
    tokens, types, merges = _vocab(package, int(config["vocab_size"]))

    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, arch_name)
        writer.add_name(package.name)
        writer.add_version(package.version)
        _add_hparams(writer, model_type, config)
        writer.add_file_type(
            gguf.LlamaFileType.ALL_F32 if dtype == "float32" else gguf.LlamaFileType.MOSTLY_F16
        )
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("gpt-2")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(int(config["bos_token_id"]))
        writer.add_eos_token_id(int(config["eos_token_id"]))
        writer.add_pad_token_id(int(config["pad_token_id"]))
        writer.add_add_bos_token(False)
        for name, array in tensors.items():
            half = (
                dtype == "float16"
                and array.ndim == 2
                and not name.endswith(
                    (".ssm_conv1d.weight", ".ssm_a", ".ssm_d", ".ssm_norm.weight")
                )
            )
            writer.add_tensor(name, array.astype(np.float16 if half else np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {
        "arch": arch_name,
        "dtype": dtype,
        "tensors": len(tensors),
        "bytes": out.stat().st_size,
        "out": str(out),
    }


def _gguf_tensors(
    package: Package, arch: gguf.MODEL_ARCH, config: dict[str, Any], n_layer: int
) -> dict[str, npt.NDArray[np.float32]]:
    names = gguf.get_tensor_name_map(arch, n_layer)
    out: dict[str, npt.NDArray[np.float32]] = {}
    mamba2 = arch == gguf.MODEL_ARCH.MAMBA2
    for hf_name, array in tensors_as_numpy(package).items():
        if hf_name == "lm_head.weight":  # tied: llama.cpp reuses token_embd
            continue
        lookup = hf_name
        if hf_name.endswith(".dt_bias"):  # Mamba-2's name for the dt projection's bias
            lookup = hf_name.removesuffix(".dt_bias") + ".dt_proj.bias"
        name = names.get_name(lookup, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise PackageError(
                f"export_gguf: tensor {hf_name!r} of {package.ref} has no GGUF name for "
                f"architecture {gguf.MODEL_ARCH_NAMES[arch]!r}; hint: the package's layout is "
                "not one llama.cpp reads"
            )
        if hf_name.endswith(".A_log"):
            array = -np.exp(array)
        if ".conv1d.weight" in hf_name:
            array = array.reshape(array.shape[0], array.shape[-1])
        if mamba2 and hf_name.endswith((".A_log", ".D")):
            array = array.reshape(*array.shape, 1)
        if mamba2 and hf_name.endswith(".mixer.norm.weight"):
            groups = int(config["n_groups"])
            array = array.reshape(groups, array.shape[0] // groups)
        out[name] = np.ascontiguousarray(array, dtype=np.float32)
    return out


def _add_hparams(writer: gguf.GGUFWriter, model_type: str, config: dict[str, Any]) -> None:
    d_model = int(config["hidden_size"])
    writer.add_context_length(2**20)  # a recurrent model has no trained context length
    writer.add_embedding_length(d_model)
    writer.add_feed_forward_length(0)  # llama.cpp requires the keys; SSMs have no FFN
    writer.add_head_count(0)
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_ssm_conv_kernel(int(config["conv_kernel"]))
    writer.add_ssm_state_size(int(config["state_size"]))
    writer.add_layer_norm_rms_eps(float(config["layer_norm_epsilon"]))
    if model_type == "mamba":
        writer.add_ssm_inner_size(int(config["intermediate_size"]))
        writer.add_ssm_time_step_rank(int(config["time_step_rank"]))
        writer.add_ssm_dt_b_c_rms(False)
    else:
        d_inner = int(config["expand"]) * d_model
        writer.add_ssm_inner_size(d_inner)
        writer.add_ssm_time_step_rank(int(config["num_heads"]))
        writer.add_ssm_group_count(int(config["n_groups"]))


def _vocab(package: Package, vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    spec = json.loads(package.tokenizer_json)
    model = spec["model"]
    by_id: dict[int, str] = {int(i): str(t) for t, i in model["vocab"].items()}
    special: set[int] = set()
    for added in spec.get("added_tokens", []):
        by_id[int(added["id"])] = str(added["content"])
        if added.get("special"):
            special.add(int(added["id"]))
    missing = [i for i in range(vocab_size) if i not in by_id]
    if missing or len(by_id) > vocab_size:
        raise PackageError(
            f"export_gguf: {package.ref}'s tokenizer.json has {len(by_id)} tokens for a "
            f"vocabulary of {vocab_size} (first missing id: {missing[0] if missing else None}); "
            "hint: GGUF needs one token per embedding row"
        )
    tokens = [by_id[i] for i in range(vocab_size)]
    types = [_CONTROL if i in special else _NORMAL for i in range(vocab_size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges
