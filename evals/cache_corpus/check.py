"""Validates every file of the cache corpus and prints its counts (never its texts).

Checks, file by file and across files:

- each triple: the seven fields, strings, an id ``w<x>-NNNN`` matching its file
  ``written_<x>.jsonl``, ``source`` "written", a one-word lowercase domain, a known
  ``miss_type``, 4–45 words per text, three different texts;
- each public pair: its five fields, a 0/1 label, two different non-empty texts;
- ids unique across all files; no text repeated across records;
- NO overlap with the shared development sets (``cache_pairs_dev.jsonl`` and
  ``memory_recall_dev.jsonl``, found by :func:`evals.eval_dir`): an exact match, or a word-
  trigram Jaccard >= 0.6 (:mod:`evals.cache_corpus.overlap`). When the sets are absent the
  overlap check is skipped with a note (``--require-dev`` makes that an error).

Warnings (quality rules that do not block): a miss_type over 15% of a file's triples, fewer
than a fifth of queries with 20+ words, fewer than a third of paraphrases with low word
overlap, and queries of two triples that are near-duplicates (a stamped template).

Messages name files, lines and ids, never texts, so the ``report`` split is not read case
by case here. Usage::

    .venv/bin/python -m evals.cache_corpus.check [--eval-dir DIR] [--require-dev]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m``
    sys.path.insert(0, str(ROOT))

from evals import eval_dir  # noqa: E402
from evals.cache_corpus import (  # noqa: E402
    HERE,
    MISS_TYPES,
    OPTIONAL_TRIPLE_FIELDS,
    PAIR_FIELDS,
    TRIPLE_FIELDS,
    CorpusError,
    domain_group,
    public_files,
    read_jsonl,
    split_of,
    written_files,
)
from evals.cache_corpus.overlap import NEAR_DUPLICATE, TrigramIndex, fold, words  # noqa: E402

#: Word counts allowed for every text of a triple.
MIN_WORDS, MAX_WORDS = 4, 45
#: The largest share of one miss_type in a file before a warning.
MAX_TYPE_SHARE = 0.15
#: Wanted: at least this share of queries with LONG_WORDS or more words.
LONG_WORDS, LONG_SHARE = 20, 0.2
#: Wanted: at least this share of paraphrases whose word sets overlap the query's at most
#: LOW_OVERLAP (Jaccard of the sets of words).
LOW_OVERLAP, LOW_OVERLAP_SHARE = 0.35, 1 / 3
#: The development sets the corpus must not overlap, and the fields holding their texts.
DEV_SETS = {
    "cache_pairs_dev.jsonl": ("query", "paraphrase", "near_miss"),
    "memory_recall_dev.jsonl": ("content", "question"),
}
_TEXTS = ("query", "paraphrase", "near_miss")
_DOMAIN = re.compile(r"^[a-z]+$")
_WRITTEN_ID = re.compile(r"^(w[a-z0-9]*)-\d{4,}$")


@dataclass
class Record:
    """One validated line: where it is, its id, its split and its texts by field."""

    where: str
    id: str
    kind: str  # "triple" or "pair"
    split: str
    texts: dict[str, str]
    fields: dict[str, Any]


@dataclass
class Report:
    """What :func:`run_check` found: errors block, warnings advise, counts describe."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    @property
    def triples(self) -> list[Record]:
        return [record for record in self.records if record.kind == "triple"]


def _text_problems(value: Any, name: str, where: str, bounds: tuple[int, int] | None) -> list[str]:
    if not isinstance(value, str) or not value.strip():
        return [f"{where}: {name} must be a non-empty string"]
    problems = []
    if value != value.strip() or "\n" in value:
        problems.append(f"{where}: {name} has leading/trailing whitespace or a line break")
    if bounds is not None:
        count = len(value.split())
        if not bounds[0] <= count <= bounds[1]:
            problems.append(f"{where}: {name} has {count} words; expected {bounds[0]}–{bounds[1]}")
    return problems


def check_triple(record: dict[str, Any], where: str, prefix: str) -> list[str]:
    """Every problem of one triple ``record`` (empty when it is valid).

    Args:
        record: The parsed JSON object.
        where: ``file:line`` for the messages.
        prefix: The id prefix its file requires (``wa`` for ``written_a.jsonl``).
    """
    missing = [name for name in TRIPLE_FIELDS if name not in record]
    if missing:
        return [f"{where}: missing field(s) {', '.join(missing)}"]
    problems = [
        f"{where}: unexpected field {name!r}"
        for name in record
        if name not in TRIPLE_FIELDS and name not in OPTIONAL_TRIPLE_FIELDS
    ]
    match = _WRITTEN_ID.match(record["id"]) if isinstance(record["id"], str) else None
    if match is None or match.group(1) != prefix:
        problems.append(f"{where}: id {record['id']!r} should look like '{prefix}-0001'")
    for name in _TEXTS:
        problems += _text_problems(record[name], name, where, (MIN_WORDS, MAX_WORDS))
    domain = record["domain"]
    if not isinstance(domain, str) or not _DOMAIN.match(domain):
        problems.append(f"{where}: domain {domain!r} must be one lowercase word")
    if record["miss_type"] not in MISS_TYPES:
        problems.append(f"{where}: miss_type {record['miss_type']!r} is not one of {MISS_TYPES}")
    if record["source"] != "written":
        problems.append(f"{where}: source {record['source']!r} should be 'written'")
    if not problems:
        folded = [fold(record[name]) for name in _TEXTS]
        if len(set(folded)) < 3:
            problems.append(f"{where}: query, paraphrase and near_miss must all differ")
    return problems


def check_pair(record: dict[str, Any], where: str) -> list[str]:
    """Every problem of one public pair ``record`` (empty when it is valid)."""
    missing = [name for name in PAIR_FIELDS if name not in record]
    if missing:
        return [f"{where}: missing field(s) {', '.join(missing)}"]
    problems = []
    if not isinstance(record["id"], str) or not record["id"]:
        problems.append(f"{where}: id must be a non-empty string")
    for name in ("a", "b", "source"):
        problems += _text_problems(record[name], name, where, None)
    label = record["label"]
    if isinstance(label, bool) or label not in (0, 1):
        problems.append(f"{where}: label must be 0 or 1, got {label!r}")
    if not problems and fold(record["a"]) == fold(record["b"]):
        problems.append(f"{where}: a and b are the same text")
    return problems


def _read(path: Path, report: Report) -> Iterable[tuple[str, dict[str, Any]]]:
    try:
        for number, record in read_jsonl(path):
            yield f"{path.name}:{number}", record
    except CorpusError as err:
        report.errors.append(str(err))


def validate_files(folder: Path, report: Report) -> None:
    """Validates every corpus file in ``folder``; appends errors and valid records."""
    for path in written_files(folder):
        prefix = "w" + path.stem.removeprefix("written_")
        for where, record in _read(path, report):
            problems = check_triple(record, where, prefix)
            report.errors += problems
            if not problems:
                texts = {name: record[name] for name in _TEXTS}
                split = split_of(record["id"], domain_group(record))
                report.records.append(Record(where, record["id"], "triple", split, texts, record))
    for path in public_files(folder):
        for where, record in _read(path, report):
            problems = check_pair(record, where)
            report.errors += problems
            if not problems:
                texts = {"a": record["a"], "b": record["b"]}
                split = split_of(record["id"], domain_group({"source": record["source"]}))
                report.records.append(Record(where, record["id"], "pair", split, texts, record))


def check_unique(report: Report) -> None:
    """Errors for ids used twice and for one text in two records (after folding)."""
    seen: dict[str, str] = {}
    for record in report.records:
        if record.id in seen:
            report.errors.append(f"{record.where}: id {record.id} also at {seen[record.id]}")
        seen.setdefault(record.id, record.where)
    owners: dict[str, set[str]] = defaultdict(set)
    for record in report.records:
        for text in record.texts.values():
            owners[fold(text)].add(record.id)
    for ids in owners.values():
        if len(ids) > 1:
            report.errors.append(f"one text appears in records {', '.join(sorted(ids))}")


def dev_texts(folder: Path) -> list[tuple[str, str]] | None:
    """(``file#id``, text) for every text of the development sets; None when absent."""
    found: list[tuple[str, str]] = []
    for name, names in DEV_SETS.items():
        path = folder / name
        if not path.is_file():
            return None
        for number, record in read_jsonl(path):
            label = f"{name}#{record.get('id') or record.get('key') or number}"
            found += [(label, record[key]) for key in names if isinstance(record.get(key), str)]
    return found


def check_overlap(report: Report, dev: list[tuple[str, str]]) -> None:
    """Errors for every corpus text equal or near-duplicate to a development-set text."""
    index = TrigramIndex(dev)
    for record in report.records:
        for name, text in record.texts.items():
            for label, similarity in index.near(text, NEAR_DUPLICATE)[:3]:
                report.errors.append(
                    f"{record.where}: {record.id} {name} overlaps {label} "
                    f"(trigram Jaccard {similarity:.2f})"
                )


def _word_overlap(left: str, right: str) -> float:
    a, b = set(words(left)), set(words(right))
    return len(a & b) / len(a | b) if a | b else 0.0


def quality_warnings(report: Report) -> None:
    """Warnings for the quality rules that are shares, per file, and for stamped templates."""
    by_file: dict[str, list[Record]] = defaultdict(list)
    for record in report.triples:
        by_file[record.where.split(":")[0]].append(record)
    for name, records in sorted(by_file.items()):
        n = len(records)
        for miss_type, count in Counter(r.fields["miss_type"] for r in records).items():
            if count / n > MAX_TYPE_SHARE:
                report.warnings.append(f"{name}: miss_type {miss_type} is {count / n:.0%} of {n}")
        long = sum(len(r.texts["query"].split()) >= LONG_WORDS for r in records) / n
        if long < LONG_SHARE:
            report.warnings.append(f"{name}: {long:.0%} of queries have {LONG_WORDS}+ words")
        low = sum(
            _word_overlap(r.texts["query"], r.texts["paraphrase"]) <= LOW_OVERLAP for r in records
        )
        if low / n < LOW_OVERLAP_SHARE:
            report.warnings.append(f"{name}: {low / n:.0%} of paraphrases have low word overlap")
    queries = TrigramIndex((r.id, r.texts["query"]) for r in report.triples)
    for record in report.triples:
        close = [label for label, _ in queries.near(record.texts["query"]) if label != record.id]
        if close and record.id < min(close):
            report.warnings.append(f"near-duplicate queries: {record.id}, {', '.join(close)}")


def run_check(
    folder: Path = HERE, dev_folder: Path | None = None, require_dev: bool = False
) -> Report:
    """Runs every check on the corpus in ``folder`` against the development sets.

    Args:
        folder: The corpus folder (this package's by default).
        dev_folder: The folder of the development sets (default :func:`evals.eval_dir`).
        require_dev: Make a missing development set an error instead of a note.
    """
    report = Report()
    validate_files(folder, report)
    if not report.records:
        report.errors.append(f"no written_*.jsonl or public_*.jsonl records in {folder}")
    check_unique(report)
    dev_dir = eval_dir(dev_folder)
    dev = dev_texts(dev_dir)
    if dev is None:
        message = f"the development sets are not in {dev_dir}: overlap check skipped"
        (report.errors if require_dev else report.notes).append(message)
    else:
        check_overlap(report, dev)
        report.notes.append(f"overlap checked against {len(dev)} development-set texts")
    quality_warnings(report)
    return report


def _table(title: str, counts: dict[str, Counter[str]]) -> list[str]:
    lines = [f"{title:<22}{'tune':>7}{'report':>8}{'all':>7}"]
    for key in sorted(counts):
        row = counts[key]
        lines.append(f"{key:<22}{row['tune']:>7}{row['report']:>8}{row.total():>7}")
    return lines


def summary(report: Report) -> list[str]:
    """The counts per file, domain, miss_type and split, as lines (no texts, no ids)."""
    tables: dict[str, dict[str, Counter[str]]] = {
        "file": defaultdict(Counter),
        "domain": defaultdict(Counter),
        "miss_type": defaultdict(Counter),
    }
    for record in report.records:
        tables["file"][record.where.split(":")[0]][record.split] += 1
        if record.kind == "triple":
            tables["domain"][record.fields["domain"]][record.split] += 1
            tables["miss_type"][record.fields["miss_type"]][record.split] += 1
    lines: list[str] = []
    for title, counts in tables.items():
        lines += [*_table(title, counts), ""]
    n_triples = len(report.triples)
    n_pairs = 2 * n_triples + len(report.records) - n_triples
    lines.append(f"{n_triples} triples, {n_pairs} labelled pairs in all")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Prints the counts, notes, warnings and errors; returns 1 when there are errors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, help="the folder of the development sets")
    parser.add_argument("--folder", type=Path, default=HERE, help="the corpus folder")
    parser.add_argument("--require-dev", action="store_true", help="fail without the dev sets")
    args = parser.parse_args(argv)
    report = run_check(args.folder, args.eval_dir, args.require_dev)
    for line in summary(report):
        print(line)
    for kind, messages in (("note", report.notes), ("warning", report.warnings)):
        for message in messages:
            print(f"{kind}: {message}")
    for message in report.errors:
        print(f"error: {message}", file=sys.stderr)
    print(f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)")
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
