"""int8 packages in pure Python: the per-row rule, the stored form, the manifest's record.

This module owns what makes a package ``int8`` (docs/format.md, "int8 weights"): which
tensors may be quantised (the 2-D projections of every block, optionally the tied
embedding / LM head), how one is stored (``<name>`` as safetensors ``I8`` in its own shape
plus ``<name>_scale``, one float32 per row), the manifest's ``quantization`` field and the
``quantization_config`` of ``config.json`` that says which scheme it is. The rule itself::

    scale[r] = float32(max_c |W[r, c]| / 127);   Q[r, c] = clip(round(W[r, c] / scale[r]), ±127)

(round half to even, the division in float64, a zero row stored as scale 0). The numpy
reference is :func:`evermind.model.quantize.quantize_rows`; this copy exists because the tab,
which has no numpy, exports packages too, and a unit test holds the two to the same bytes.

Hugging Face ``transformers`` has no such scheme, and must not load the int8 values as if
they were floats (``transformers`` 5 does exactly that when it meets an ``I8`` tensor under
a float weight's name: it warns about an unknown ``quant_method`` and copies the integers).
So an int8 package's ``config.json`` says ``torch_dtype: "int8"``, under which
``MambaForCausalLM.from_pretrained`` refuses to build the model ("not a floating-point
dtype"), and names the scheme in ``quantization_config`` (``quant_method:
"evermind_int8"``) for any reader that looks. Browser-safe: standard library only.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from evermind.errors import PackageError

#: The manifest field that records the quantisation (present exactly when dtype is int8).
QUANT_FIELD = "quantization"
SCHEME = "int8-per-row-symmetric"
#: ``config.json``'s ``quantization_config.quant_method`` (not a ``transformers`` method).
QUANT_METHOD = "evermind_int8"
SCALE_SUFFIX = "_scale"
QMAX = 127
QUANT_FIELDS = frozenset({"scheme", "scale_suffix", "tensors"})
#: Names of the block projections that int8 packages always quantise.
PROJECTION_SUFFIXES = (
    ".mixer.in_proj.weight",
    ".mixer.x_proj.weight",
    ".mixer.dt_proj.weight",
    ".mixer.out_proj.weight",
)
#: The embedding (the LM head too when tied) and an untied LM head: quantisable on request.
TABLE_NAMES = ("backbone.embeddings.weight", "lm_head.weight")
#: Whether an int8 export quantises the tables by default (benchmarks/quantize.py measured
#: both ways; docs/benchmarks.md has the numbers).
INT8_EMBEDDING = True


def quantizable(name: str) -> bool:
    """True for a tensor name the int8 scheme may quantise (a 2-D projection or table)."""
    return name in TABLE_NAMES or (
        name.startswith("backbone.layers.") and name.endswith(PROJECTION_SUFFIXES)
    )


def choose_tensors(names: Sequence[str], *, embedding: bool) -> list[str]:
    """The names an int8 export quantises: every projection, and the tables if `embedding`.

    Args:
        names: Every tensor name of the model.
        embedding: Also quantise ``backbone.embeddings.weight`` (and ``lm_head.weight``).

    Returns:
        The sorted names to store as int8.
    """
    return sorted(n for n in names if quantizable(n) and (embedding or n not in TABLE_NAMES))


def _float32(value: float) -> float:
    """`value` rounded to the nearest float32 (what ``array('f')`` stores)."""
    return float(array("f", (value,))[0])


def quantize_row_values(
    values: Sequence[float], rows: int, cols: int, *, name: str
) -> tuple[bytes, array[float]]:
    """Quantise a row-major (rows, cols) float weight to int8 bytes and float32 scales.

    Args:
        values: ``rows * cols`` finite floats, row-major (one row per output channel).
        rows: Number of rows.
        cols: Number of columns.
        name: The tensor name, for error messages.

    Returns:
        ``(rows * cols`` int8 bytes, ``array('f')`` of ``rows`` scales``)``.

    Raises:
        PackageError: A value is NaN or infinite; the message names the tensor and index.
    """
    if len(values) != rows * cols:
        raise PackageError(
            f"tensor {name!r}: {len(values)} values for shape ({rows}, {cols}); expected "
            f"{rows * cols}"
        )
    if not all(map(math.isfinite, values)):
        bad = next(i for i, v in enumerate(values) if not math.isfinite(v))
        raise PackageError(
            f"tensor {name!r}: value {values[bad]!r} at flat index {bad} cannot be quantised; "
            "expected finite weights. Hint: the model diverged; export a finite checkpoint"
        )
    scales = array("f")
    out = bytearray(rows * cols)
    for r in range(rows):
        row = values[r * cols : (r + 1) * cols]
        scale = _float32(max(map(abs, row), default=0.0) / QMAX)
        scales.append(scale)
        if scale == 0.0:
            continue  # a zero row: Q stays 0, no division
        quantised = [max(-QMAX, min(QMAX, round(v / scale))) for v in row]
        out[r * cols : (r + 1) * cols] = array("b", quantised).tobytes()
    return bytes(out), scales


def dequantize_row_values(data: bytes, scales: Sequence[float], cols: int) -> array[float]:
    """W' = Q * scale per row as a float32 ``array('f')`` (bit for bit numpy's float32
    product: an int8 times a float32 is exact in a float64 before the one rounding).

    Args:
        data: ``rows * cols`` int8 bytes, row-major.
        scales: ``rows`` scales.
        cols: Number of columns.

    Returns:
        A new ``array('f')`` of ``rows * cols`` values.
    """
    values = array("b", data)
    out = array("f", bytes(4 * len(values)))
    for r, scale in enumerate(scales):
        lo = r * cols
        out[lo : lo + cols] = array("f", [q * scale for q in values[lo : lo + cols]])
    return out


def first_out_of_range(data: bytes) -> int:
    """Flat index of the first stored ``-128`` (the symmetric scheme never writes it), or -1."""
    return data.find(b"\x80")


def describe(tensors: Sequence[str]) -> dict[str, Any]:
    """The manifest's ``quantization`` object for these quantised tensor names."""
    return {"scale_suffix": SCALE_SUFFIX, "scheme": SCHEME, "tensors": sorted(tensors)}


def quantization_config(field: Mapping[str, Any]) -> dict[str, Any]:
    """``config.json``'s ``quantization_config`` for a manifest ``quantization`` object."""
    return {
        "bits": 8,
        "quant_method": QUANT_METHOD,
        "scale_suffix": field["scale_suffix"],
        "scheme": field["scheme"],
        "tensors": list(field["tensors"]),
    }


def check_quant_field(value: Any) -> None:
    """Check the manifest's ``quantization`` object on its own.

    Args:
        value: The parsed field.

    Raises:
        PackageError: It is not an object with exactly the known fields, names another
            scheme, or lists a tensor the scheme cannot quantise (or lists one twice).
    """
    where = f"manifest.json: field {QUANT_FIELD!r}"
    if not isinstance(value, dict) or set(value) != QUANT_FIELDS:
        shown = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise PackageError(
            f"{where} must be an object with exactly {sorted(QUANT_FIELDS)}, found {shown}"
        )
    if value["scheme"] != SCHEME or value["scale_suffix"] != SCALE_SUFFIX:
        raise PackageError(
            f"{where}: scheme {value['scheme']!r} with scale suffix {value['scale_suffix']!r} "
            f"is not understood; expected {SCHEME!r} and {SCALE_SUFFIX!r}"
        )
    names = value["tensors"]
    if (
        not isinstance(names, list)
        or not names
        or not all(isinstance(n, str) for n in names)
        or names != sorted(set(names))
    ):
        raise PackageError(f"{where}: 'tensors' must be a non-empty sorted list of distinct names")
    bad = [n for n in names if not quantizable(n)]
    if bad:
        raise PackageError(
            f"{where}: tensor {bad[0]!r} cannot be int8; expected the block projections "
            f"({', '.join(s.lstrip('.') for s in PROJECTION_SUFFIXES)}) or {list(TABLE_NAMES)}"
        )


def scale_name(name: str) -> str:
    """The safetensors name of a quantised tensor's per-row scales."""
    return name + SCALE_SUFFIX


def held_bytes(model: Mapping[str, Any], field: Mapping[str, Any] | None) -> int:
    """Bytes a loaded model holds for its weights, from the manifest alone: 4 per parameter,
    and for each tensor the ``quantization`` field lists 1 per element plus a 4-byte scale
    per row (an int8 model keeps no float copy of those).

    Args:
        model: The manifest's ``model`` summary (dims and ``n_params``).
        field: The manifest's ``quantization`` field, or None for a float package.

    Returns:
        The estimate in bytes.
    """
    total = 4 * int(model.get("n_params", 0))
    if not field:
        return total
    d, inner = int(model["d_model"]), int(model["d_inner"])
    rank, state, vocab = int(model["dt_rank"]), int(model["d_state"]), int(model["vocab_size"])
    shapes = {
        ".mixer.in_proj.weight": (2 * inner, d),
        ".mixer.x_proj.weight": (rank + 2 * state, inner),
        ".mixer.dt_proj.weight": (inner, rank),
        ".mixer.out_proj.weight": (d, inner),
    }
    for name in field.get("tensors", []):
        suffix = next((s for s in PROJECTION_SUFFIXES if name.endswith(s)), None)
        rows, cols = shapes[suffix] if suffix else (vocab, d)
        total += 4 * rows - 3 * rows * cols  # 1 byte an element instead of 4, plus the scales
    return total
