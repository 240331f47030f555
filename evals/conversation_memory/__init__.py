"""The conversational-memory development set: long multi-session dialogues, questions with
the turns that answer them, and a fixed split by dialogue.

This package owns the files beside it and the one way to read them (README.md states the
format):

- ``dialogues.jsonl``: one dialogue a line (``id, title``);
- ``turns.jsonl``: one turn a line (``id, dialogue, session, date, speaker, text``), in
  conversation order;
- ``questions.jsonl``: one question a line (``id, dialogue, kind, question, gold_turns,
  distractor_turns, answer``); ``kind`` is one of :data:`KINDS`.

The split is fixed and deterministic: :func:`split_of` hashes (sha256) ``dialogue/<id>``, so
a whole dialogue (its turns and its questions) falls in ``tune`` or ``report`` and keeps its
split when dialogues are added or removed. Report numbers on ``report`` as aggregates only;
no tool here prints a ``report`` question or turn.

Standard library only, so anything may import it. :func:`load` reads and checks the
references a reader relies on (every question's dialogue and turns exist); the full
validation, with counts, is :mod:`evals.conversation_memory.check`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals import jsonl_objects

#: The folder of the set's files.
HERE = Path(__file__).resolve().parent
#: The question kinds (README.md defines each).
KINDS = (
    "single-session",
    "multi-session",
    "knowledge-update",
    "temporal",
    "paraphrased",
    "abstention",
)
#: The speakers a turn may have.
SPEAKERS = ("user", "assistant")
#: The splits a caller may ask for.
SPLITS = ("tune", "report", "all")
#: The share of dialogues the hash aims to put in ``tune``.
TUNE_SHARE = 0.5
#: What is hashed ahead of a dialogue's id (see :func:`split_of`).
SPLIT_SALT = "dialogue/"
#: The fields of each file, in file order.
DIALOGUE_FIELDS = ("id", "title")
TURN_FIELDS = ("id", "dialogue", "session", "date", "speaker", "text")
QUESTION_FIELDS = (
    "id",
    "dialogue",
    "kind",
    "question",
    "gold_turns",
    "distractor_turns",
    "answer",
)


class ConversationSetError(ValueError):
    """A file of the set cannot be read: bad JSON, a missing field, a dangling reference."""


@dataclass(frozen=True)
class Turn:
    """One turn of a dialogue: who said what, in which session, on which date."""

    id: str
    dialogue: str
    session: int
    date: str
    speaker: str
    text: str

    @property
    def content(self) -> str:
        """What the evaluation stores as the memory: ``"speaker: text"``."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    """A question about one dialogue, the turns that answer it and the stale ones."""

    id: str
    dialogue: str
    kind: str
    question: str
    gold_turns: tuple[str, ...]
    distractor_turns: tuple[str, ...]
    answer: str


@dataclass(frozen=True)
class Dialogue:
    """A dialogue with its turns (in order) and its questions, and the split it is in."""

    id: str
    title: str
    split: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]

    @property
    def sessions(self) -> int:
        """How many sessions the dialogue has."""
        return len({turn.session for turn in self.turns})


def split_of(dialogue_id: str) -> str:
    """``"tune"`` or ``"report"`` for a dialogue, from sha256 of ``dialogue/<id>``.

    Whole dialogues go one way, so the report split asks about other people's conversations
    than the tune split. The salt was chosen before any dialogue was written, among a few,
    so that the seven planned dialogue ids split 3 tune / 4 report (plain ids put 6 of 7 in
    tune); nothing of the dialogues' content was known then.

    Returns:
        ``"tune"`` when the hash, read as a fraction in [0, 1), is under
        :data:`TUNE_SHARE`, else ``"report"``.
    """
    digest = hashlib.sha256(f"{SPLIT_SALT}{dialogue_id}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return "tune" if fraction < TUNE_SHARE else "report"


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line of ``path`` as (line number, JSON object).

    Raises:
        ConversationSetError: the file is missing, or a line is not a JSON object.
    """
    if not path.is_file():
        raise ConversationSetError(f"{path}: no such file; expected the set's {path.name}")
    return jsonl_objects(path, ConversationSetError)


def _require(record: dict[str, Any], names: tuple[str, ...], where: str) -> None:
    missing = [name for name in names if name not in record]
    if missing:
        raise ConversationSetError(
            f"{where}: missing field(s) {', '.join(missing)}; expected {names}"
        )


def _ids(value: Any, where: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConversationSetError(f"{where}: {name} must be a list of turn ids, got {value!r}")
    return tuple(value)


def load(split: str = "all", folder: Path = HERE) -> list[Dialogue]:
    """The dialogues of ``split`` with their turns and questions, in file order.

    Args:
        split: ``"tune"``, ``"report"`` or ``"all"``.
        folder: Where the three files are (this package's folder by default).

    Raises:
        ConversationSetError: an unknown split, a missing field, or a turn or question that
            names a dialogue or turn that does not exist.
    """
    if split not in SPLITS:
        raise ConversationSetError(f"split must be one of {SPLITS}, got {split!r}")
    titles: dict[str, str] = {}
    for number, record in read_jsonl(folder / "dialogues.jsonl"):
        _require(record, DIALOGUE_FIELDS, f"dialogues.jsonl:{number}")
        titles[str(record["id"])] = str(record["title"])
    turns: dict[str, list[Turn]] = {d: [] for d in titles}
    turn_dialogue: dict[str, str] = {}
    for number, record in read_jsonl(folder / "turns.jsonl"):
        where = f"turns.jsonl:{number}"
        _require(record, TURN_FIELDS, where)
        turn = Turn(**{name: record[name] for name in TURN_FIELDS})
        if turn.dialogue not in turns:
            raise ConversationSetError(f"{where}: unknown dialogue {turn.dialogue!r}")
        turns[turn.dialogue].append(turn)
        turn_dialogue[turn.id] = turn.dialogue
    questions: dict[str, list[Question]] = {d: [] for d in titles}
    for number, record in read_jsonl(folder / "questions.jsonl"):
        where = f"questions.jsonl:{number}"
        _require(record, QUESTION_FIELDS, where)
        question = Question(
            id=str(record["id"]),
            dialogue=str(record["dialogue"]),
            kind=str(record["kind"]),
            question=str(record["question"]),
            gold_turns=_ids(record["gold_turns"], where, "gold_turns"),
            distractor_turns=_ids(record["distractor_turns"], where, "distractor_turns"),
            answer=str(record["answer"]),
        )
        if question.dialogue not in questions:
            raise ConversationSetError(f"{where}: unknown dialogue {question.dialogue!r}")
        for turn_id in (*question.gold_turns, *question.distractor_turns):
            if turn_dialogue.get(turn_id) != question.dialogue:
                raise ConversationSetError(
                    f"{where}: turn {turn_id!r} is not a turn of dialogue {question.dialogue!r}"
                )
        questions[question.dialogue].append(question)
    out = []
    for dialogue_id, title in titles.items():
        dialogue = Dialogue(
            id=dialogue_id,
            title=title,
            split=split_of(dialogue_id),
            turns=tuple(turns[dialogue_id]),
            questions=tuple(questions[dialogue_id]),
        )
        if split in ("all", dialogue.split):
            out.append(dialogue)
    return out
