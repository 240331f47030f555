"""The semantic cache's development corpus: written triples, public pairs, a fixed split.

This package owns the corpus files beside it and the one way to read them:

- ``written_*.jsonl``: triples written for this project, one JSON object a line
  (``id, query, paraphrase, near_miss, domain, miss_type, source``). ``query`` is a stored
  question, ``paraphrase`` means exactly the same (serving is correct), ``near_miss`` is
  close in wording but needs another answer (serving is wrong). Every such file present is
  merged, so a new ``written_<x>.jsonl`` joins without a code change.
- ``public_<name>.jsonl``: labelled pairs from a public set whose licence allows
  redistribution (``id, a, b, label, source``; ``label`` 1 same, 0 different), when one is
  present (README.md says which sets were considered and why none is here yet).

The split is fixed and deterministic: :func:`split_of` hashes (sha256) a record's domain
group together with its id, so about 60% of records fall in ``tune`` and 40% in
``report``, and a record keeps its split when others are added, removed or reordered.
Tune on ``tune``. Report on ``report`` and never print it case by case (no tool here does:
:mod:`evals.cache_corpus.check` prints counts and ids only); ``cache_pairs_dev.jsonl`` in
the shared eval folder stays a third, untouched check.

Standard library only (no numpy), so anything may import it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals import jsonl_objects

#: The folder of the corpus files.
HERE = Path(__file__).resolve().parent
#: What a near-miss changes (README.md defines each).
MISS_TYPES = (
    "entity",
    "operation",
    "direction",
    "number",
    "error_code",
    "negation",
    "unit",
    "date",
    "version",
    "scope",
    "instruction",
    "claim",
    "quantity_relation",
    "role",
    "time_scope",
    "comparison",
)
#: The splits a caller may ask for.
SPLITS = ("tune", "report", "all")
#: The share of records the hash puts in ``tune``.
TUNE_SHARE = 0.6
#: The fields of a triple, in file order.
TRIPLE_FIELDS = ("id", "query", "paraphrase", "near_miss", "domain", "miss_type", "source")
#: Optional fields of a triple: ``style`` marks the hard triples of ``written_c.jsonl``
#: (``edit_paraphrase``: the paraphrase is a small edit; ``reworded_near_miss``: the
#: near-miss is a wide rewording), which break the "small edit = different" shortcut.
OPTIONAL_TRIPLE_FIELDS = ("style",)
#: The fields of a public pair.
PAIR_FIELDS = ("id", "a", "b", "label", "source")


class CorpusError(ValueError):
    """A corpus file cannot be read: bad JSON, a missing or mistyped field, a bad split."""


@dataclass(frozen=True)
class Triple:
    """One written triple and the split it belongs to."""

    id: str
    query: str
    paraphrase: str
    near_miss: str
    domain: str
    miss_type: str
    source: str
    split: str


@dataclass(frozen=True)
class Pair:
    """Two texts and whether one cached answer serves both (``label`` 1) or not (0).

    From a triple: ``<triple id>/p`` (query, paraphrase, 1) and ``<triple id>/n`` (query,
    near_miss, 0), with the triple's domain, miss_type and split. From a public set:
    ``domain`` is the set's name and ``miss_type`` is None (the set does not say).
    """

    id: str
    a: str
    b: str
    label: int
    domain: str
    miss_type: str | None
    source: str
    split: str


def domain_group(record: dict[str, Any]) -> str:
    """The group a record is hashed with: a triple's domain, ``public:<source>`` for a pair."""
    if "domain" in record:
        return str(record["domain"])
    return f"public:{record['source']}"


def split_of(record_id: str, group: str) -> str:
    """``"tune"`` or ``"report"`` for a record, from sha256 of its domain group.

    Whole domains go one way, so the report split asks about *other topics* than the tune
    split, as a held-out set does (a per-record split would let a model learn a domain's
    phrasing on tune and meet it again on report).

    Args:
        record_id: The record's id (``wa-0001``); not used, kept for the callers' shape.
        group: Its domain group (:func:`domain_group`).

    Returns:
        ``"tune"`` when the hash, read as a fraction in [0, 1), is under :data:`TUNE_SHARE`,
        else ``"report"``. It depends on nothing else, so it never changes for a record.
    """
    del record_id  # the whole group goes one way: the report split holds other topics
    digest = hashlib.sha256(group.encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return "tune" if fraction < TUNE_SHARE else "report"


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line of ``path`` as (line number, JSON object).

    Raises:
        CorpusError: a line is not JSON, or not a JSON object.
    """
    return jsonl_objects(path, CorpusError)


def _fields(record: dict[str, Any], names: tuple[str, ...], where: str) -> None:
    missing = [name for name in names if name not in record]
    if missing:
        raise CorpusError(f"{where}: missing field(s) {', '.join(missing)}; expected {names}")


def written_files(folder: Path = HERE) -> list[Path]:
    """Every ``written_*.jsonl`` in ``folder``, by name."""
    return sorted(folder.glob("written_*.jsonl"))


def public_files(folder: Path = HERE) -> list[Path]:
    """Every ``public_*.jsonl`` in ``folder``, by name."""
    return sorted(folder.glob("public_*.jsonl"))


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise CorpusError(f"split must be one of {SPLITS}, got {split!r}")


def triples(split: str = "all", folder: Path = HERE) -> list[Triple]:
    """The written triples of ``split``, from every ``written_*.jsonl`` in ``folder``.

    Args:
        split: ``"tune"``, ``"report"`` or ``"all"``.
        folder: Where the corpus files are (this package's folder by default).

    Raises:
        CorpusError: an unknown split, or a file that cannot be read (see
            :mod:`evals.cache_corpus.check` for the full validation).
    """
    _check_split(split)
    out: list[Triple] = []
    for path in written_files(folder):
        for number, record in read_jsonl(path):
            _fields(record, TRIPLE_FIELDS, f"{path.name}:{number}")
            values = {name: str(record[name]) for name in TRIPLE_FIELDS}
            triple = Triple(**values, split=split_of(values["id"], domain_group(record)))
            if split in ("all", triple.split):
                out.append(triple)
    return out


def _public_pairs(folder: Path) -> Iterator[Pair]:
    for path in public_files(folder):
        for number, record in read_jsonl(path):
            _fields(record, PAIR_FIELDS, f"{path.name}:{number}")
            label = record["label"]
            if label not in (0, 1) or isinstance(label, bool):
                raise CorpusError(f"{path.name}:{number}: label must be 0 or 1, got {label!r}")
            source = str(record["source"])
            yield Pair(
                id=str(record["id"]),
                a=str(record["a"]),
                b=str(record["b"]),
                label=int(label),
                domain=source,
                miss_type=None,
                source=source,
                split=split_of(str(record["id"]), domain_group({"source": source})),
            )


def pairs(split: str = "all", folder: Path = HERE) -> list[Pair]:
    """Labelled pairs of ``split``: every triple as two pairs, then every public pair.

    Args:
        split: ``"tune"``, ``"report"`` or ``"all"``.
        folder: Where the corpus files are (this package's folder by default).
    """
    out: list[Pair] = []
    for triple in triples(split, folder):
        for suffix, other, label in (("p", triple.paraphrase, 1), ("n", triple.near_miss, 0)):
            out.append(
                Pair(
                    id=f"{triple.id}/{suffix}",
                    a=triple.query,
                    b=other,
                    label=label,
                    domain=triple.domain,
                    miss_type=triple.miss_type,
                    source=triple.source,
                    split=triple.split,
                )
            )
    out.extend(pair for pair in _public_pairs(folder) if split in ("all", pair.split))
    return out
