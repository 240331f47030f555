"""Validates the conversational-memory set and prints its counts (never its texts).

Checks (errors):

- every line of the three files has its fields with the right types; ids are unique (a
  turn id is ``<dialogue>-s<session>-NNN``, NNN counting the dialogue's turns from 001; a
  question id is ``<dialogue>-qNN``); a speaker is ``user`` or ``assistant``; a date is
  ``YYYY-MM-DD``, one per session, sessions numbered 1, 2, … in order and dated in order;
- every question's dialogue and every gold and distractor turn exists, in that dialogue;
  gold and distractor turns are disjoint; ``kind`` is one of the six kinds;
- by kind: an abstention question has no gold turn, every other kind has one at least; a
  multi-session question's gold turns span two sessions or more; a knowledge-update
  question lists the stale turn(s) in ``distractor_turns``, each said before its latest
  gold turn;
- the set's promised shape (:data:`SHAPE`): dialogues, sessions and turns per dialogue,
  turns and questions overall.

Then it prints counts per split and per kind, and the word overlap of each question with
its gold turns (content terms as BM25 sees them, :func:`evermind.search.terms.term_set`):
mean Jaccard, mean share of the question's terms found in the gold turns, and the share of
questions sharing no term with them. Messages name files, lines and ids, never texts, so the
``report`` split is not read case by case here. Usage::

    .venv/bin/python -m evals.conversation_memory.check [--folder DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m``
    sys.path.insert(0, str(ROOT))
try:
    import evermind  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(ROOT / "src"))

from evals.conversation_memory import (  # noqa: E402
    DIALOGUE_FIELDS,
    HERE,
    KINDS,
    QUESTION_FIELDS,
    SPEAKERS,
    TURN_FIELDS,
    ConversationSetError,
    read_jsonl,
    split_of,
)
from evermind.search.terms import jaccard, term_set  # noqa: E402

#: The shape the set promises (README.md): at least this many of each.
SHAPE = {
    "dialogues": 6,
    "sessions per dialogue": 4,
    "turns per dialogue": 150,
    "turns": 1000,
    "questions": 250,
}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DIALOGUE_ID = re.compile(r"^[a-z][a-z0-9]*$")


@dataclass
class Report:
    """What :func:`run_check` found: errors block; the records feed the counts."""

    errors: list[str] = field(default_factory=list)
    dialogues: dict[str, dict[str, Any]] = field(default_factory=dict)
    turns: dict[str, dict[str, Any]] = field(default_factory=dict)
    questions: list[dict[str, Any]] = field(default_factory=list)


def _text(value: Any, name: str, where: str) -> list[str]:
    if not isinstance(value, str) or not value.strip():
        return [f"{where}: {name} must be a non-empty string"]
    if value != value.strip() or "\n" in value:
        return [f"{where}: {name} has leading/trailing whitespace or a line break"]
    return []


def check_dialogue(record: dict[str, Any], where: str) -> list[str]:
    """Every problem of one line of ``dialogues.jsonl`` (empty when it is valid)."""
    missing = [name for name in DIALOGUE_FIELDS if name not in record]
    if missing:
        return [f"{where}: missing field(s) {', '.join(missing)}"]
    problems = _text(record["title"], "title", where)
    if not isinstance(record["id"], str) or not _DIALOGUE_ID.match(record["id"]):
        problems.append(f"{where}: dialogue id {record['id']!r} must be lowercase letters/digits")
    return problems


def check_turns(records: list[tuple[str, dict[str, Any]]], dialogues: set[str]) -> list[str]:
    """Every problem of the turns, given as (where, record) in file order."""
    problems: list[str] = []
    count: Counter[str] = Counter()
    session_of: dict[str, int] = {}
    dates: dict[tuple[str, int], str] = {}
    seen: set[str] = set()
    for where, record in records:
        missing = [name for name in TURN_FIELDS if name not in record]
        if missing:
            problems.append(f"{where}: missing field(s) {', '.join(missing)}")
            continue
        dialogue, session, date = record["dialogue"], record["session"], record["date"]
        if dialogue not in dialogues:
            problems.append(f"{where}: unknown dialogue {dialogue!r}")
            continue
        if isinstance(session, bool) or not isinstance(session, int) or session < 1:
            problems.append(f"{where}: session must be an integer >= 1, got {session!r}")
            continue
        count[dialogue] += 1
        expected = f"{dialogue}-s{session}-{count[dialogue]:03d}"
        if record["id"] != expected:
            problems.append(f"{where}: turn id {record['id']!r}; expected {expected!r}")
        if record["id"] in seen:
            problems.append(f"{where}: turn id {record['id']!r} repeated")
        seen.add(str(record["id"]))
        previous = session_of.get(dialogue, 0)
        if session not in (previous, previous + 1):
            problems.append(f"{where}: session {session} follows session {previous}")
        session_of[dialogue] = session
        if not isinstance(date, str) or not _DATE.match(date):
            problems.append(f"{where}: date {date!r} is not YYYY-MM-DD")
        elif (dialogue, session) in dates and dates[dialogue, session] != date:
            problems.append(f"{where}: session {session} has two dates")
        elif session > 1 and dates.get((dialogue, session - 1), "") >= date:
            problems.append(f"{where}: session {session} is not dated after session {session - 1}")
        dates[dialogue, session] = str(date)
        if record["speaker"] not in SPEAKERS:
            problems.append(f"{where}: speaker {record['speaker']!r} is not one of {SPEAKERS}")
        problems += _text(record["text"], "text", where)
    return problems


def check_question(
    record: dict[str, Any], where: str, turns: dict[str, dict[str, Any]], order: dict[str, int]
) -> list[str]:
    """Every problem of one question ``record``.

    Args:
        record: The parsed JSON object.
        where: ``file:line`` for the messages.
        turns: Every turn by id.
        order: Every turn's position in its file (for "said before").
    """
    missing = [name for name in QUESTION_FIELDS if name not in record]
    if missing:
        return [f"{where}: missing field(s) {', '.join(missing)}"]
    problems = _text(record["question"], "question", where) + _text(
        record["answer"], "answer", where
    )
    kind, dialogue = record["kind"], record["dialogue"]
    if kind not in KINDS:
        problems.append(f"{where}: kind {kind!r} is not one of {KINDS}")
    if not re.match(rf"^{re.escape(str(dialogue))}-q\d{{2,}}$", str(record["id"])):
        problems.append(f"{where}: question id {record['id']!r} should look like '{dialogue}-q01'")
    lists = {}
    for name in ("gold_turns", "distractor_turns"):
        value = record[name]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"{where}: {name} must be a list of turn ids")
            return problems
        if len(set(value)) != len(value):
            problems.append(f"{where}: {name} repeats a turn")
        for turn_id in value:
            if turn_id not in turns:
                problems.append(f"{where}: {name} names {turn_id!r}, which is not a turn")
            elif turns[turn_id]["dialogue"] != dialogue:
                problems.append(f"{where}: {name} names {turn_id!r} of another dialogue")
        lists[name] = [t for t in value if t in turns]
    gold, stale = lists["gold_turns"], lists["distractor_turns"]
    if set(gold) & set(stale):
        problems.append(f"{where}: a turn is both gold and distractor")
    if kind == "abstention" and record["gold_turns"]:
        problems.append(f"{where}: an abstention question has no gold turns")
    if kind != "abstention" and not record["gold_turns"]:
        problems.append(f"{where}: a {kind} question needs at least one gold turn")
    if kind == "multi-session" and len({turns[t]["session"] for t in gold}) < 2:
        problems.append(f"{where}: a multi-session question's gold turns span one session")
    if kind == "knowledge-update":
        if not record["distractor_turns"]:
            problems.append(f"{where}: a knowledge-update question lists its stale turn(s)")
        elif gold and max(order[t] for t in stale) > max(order[t] for t in gold):
            problems.append(f"{where}: a stale turn comes after the latest gold turn")
    return problems


def run_check(folder: Path = HERE) -> Report:
    """Reads and validates the three files of ``folder``; never raises for bad content."""
    report = Report()
    try:
        for number, record in read_jsonl(folder / "dialogues.jsonl"):
            where = f"dialogues.jsonl:{number}"
            problems = check_dialogue(record, where)
            if not problems and record["id"] in report.dialogues:
                problems = [f"{where}: dialogue id {record['id']!r} repeated"]
            report.errors += problems
            if not problems:
                report.dialogues[record["id"]] = record
        turn_lines = [(f"turns.jsonl:{n}", r) for n, r in read_jsonl(folder / "turns.jsonl")]
        question_lines = list(read_jsonl(folder / "questions.jsonl"))
    except ConversationSetError as err:
        report.errors.append(str(err))
        return report
    report.errors += check_turns(turn_lines, set(report.dialogues))
    order: dict[str, int] = {}
    for position, (_, record) in enumerate(turn_lines):
        if isinstance(record.get("id"), str) and "dialogue" in record and "session" in record:
            report.turns.setdefault(record["id"], record)
            order.setdefault(record["id"], position)
    seen: set[str] = set()
    for number, record in question_lines:
        where = f"questions.jsonl:{number}"
        problems = check_question(record, where, report.turns, order)
        if not problems and record["id"] in seen:
            problems = [f"{where}: question id {record['id']!r} repeated"]
        if not problems and record["dialogue"] not in report.dialogues:
            problems = [f"{where}: unknown dialogue {record['dialogue']!r}"]
        report.errors += problems
        if not problems:
            seen.add(record["id"])
            report.questions.append(record)
    return report


def check_shape(report: Report, shape: dict[str, int] = SHAPE) -> list[str]:
    """The ways the set falls short of ``shape`` (empty when it has that shape)."""
    problems = []
    per_dialogue: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for turn in report.turns.values():
        per_dialogue[turn["dialogue"]].append(turn)
    if len(report.dialogues) < shape["dialogues"]:
        problems.append(f"{len(report.dialogues)} dialogues; expected {shape['dialogues']}+")
    for dialogue in report.dialogues:
        turns = per_dialogue[dialogue]
        sessions = len({t["session"] for t in turns})
        if sessions < shape["sessions per dialogue"]:
            problems.append(f"dialogue {dialogue}: {sessions} sessions; expected 4+")
        if len(turns) < shape["turns per dialogue"]:
            problems.append(
                f"dialogue {dialogue}: {len(turns)} turns; expected {shape['turns per dialogue']}+"
            )
    if len(report.turns) < shape["turns"]:
        problems.append(f"{len(report.turns)} turns; expected {shape['turns']}+")
    if len(report.questions) < shape["questions"]:
        problems.append(f"{len(report.questions)} questions; expected {shape['questions']}+")
    return problems


def overlap_stats(report: Report) -> dict[str, dict[str, float]]:
    """Per kind (and ``all``): how much a question's content terms overlap its gold turns'.

    Returns:
        ``{kind: {"n", "jaccard", "covered", "disjoint"}}``: the mean Jaccard of the
        question's terms and the union of its gold turns' terms, the mean share of the
        question's terms found in them, and the share of questions sharing no term.
        Abstention questions (no gold) are left out.
    """
    rows: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for question in report.questions:
        if not question["gold_turns"]:
            continue
        asked = term_set(question["question"])
        gold = frozenset().union(
            *(term_set(report.turns[t]["text"]) for t in question["gold_turns"])
        )
        covered = len(asked & gold) / len(asked) if asked else 0.0
        for bucket in ("all", question["kind"]):
            rows[bucket].append((jaccard(asked, gold), covered))
    return {
        kind: {
            "n": float(len(values)),
            "jaccard": sum(j for j, _ in values) / len(values),
            "covered": sum(c for _, c in values) / len(values),
            "disjoint": sum(c == 0 for _, c in values) / len(values),
        }
        for kind, values in rows.items()
    }


def print_counts(report: Report) -> None:
    """Prints counts per split and kind, and the overlap table (numbers and ids only)."""
    per_dialogue = Counter(t["dialogue"] for t in report.turns.values())
    sessions: dict[str, set[int]] = defaultdict(set)
    for turn in report.turns.values():
        sessions[turn["dialogue"]].add(turn["session"])
    asked = Counter(q["dialogue"] for q in report.questions)
    print("| dialogue | split | sessions | turns | questions |")
    print("|---|---|---|---|---|")
    for dialogue in report.dialogues:
        print(
            f"| {dialogue} | {split_of(dialogue)} | {len(sessions[dialogue])} "
            f"| {per_dialogue[dialogue]} | {asked[dialogue]} |"
        )
    print(f"| all | - | - | {len(report.turns)} | {len(report.questions)} |\n")
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for question in report.questions:
        kinds[question["kind"]][split_of(question["dialogue"])] += 1
    print("| kind | tune | report | all |")
    print("|---|---|---|---|")
    for kind in KINDS:
        c = kinds[kind]
        print(f"| {kind} | {c['tune']} | {c['report']} | {c['tune'] + c['report']} |")
    print("\n| kind | n | Jaccard(question, gold) | question terms in gold | no shared term |")
    print("|---|---|---|---|---|")
    stats = overlap_stats(report)
    for kind in ("all", *KINDS):
        if kind in stats:
            s = stats[kind]
            print(
                f"| {kind} | {int(s['n'])} | {s['jaccard']:.3f} | {s['covered']:.3f} "
                f"| {s['disjoint']:.3f} |"
            )


def main(argv: list[str] | None = None) -> int:
    """Validates the set; prints the problems (exit 1) or the counts (exit 0)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=HERE, help="the set's folder")
    args = parser.parse_args(argv)
    report = run_check(args.folder)
    errors = report.errors or check_shape(report)
    if errors:
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        print(f"{len(errors)} problem(s) in {args.folder}", file=sys.stderr)
        return 1
    print_counts(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
