"""The experience store's tables, records and connection (native-only: sqlite3).

Owns the SQLite schema of ``evermind.memory.experience`` (its own ``experience_*`` tables in
the memory file), the records it returns (:class:`Episode`, :class:`Skill`, :class:`Run`, …)
and :class:`ExperienceDB`: a connection per operation (one kept for ``":memory:"``), one
lock, ``BEGIN IMMEDIATE`` transactions, and
the reads every part shares (steps, skills, audit lines). Every statement is scoped to the
store namespace (the tenant).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evermind.errors import ConfigError, InputError, NotFound, StorageError
from evermind.memory.skills import Parameter, Step

#: The runs kept per namespace unless told otherwise.
DEFAULT_MAX_RUNS = 500
#: What ``forget_all`` must be given to delete a namespace's whole experience.
FORGET_ALL_CONFIRM = "forget all experience"
RUN_STATUSES = ("succeeded", "failed", "cancelled")
MAX_STEPS = 200
MAX_TEXT = 20_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experience_episodes (
    namespace TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (namespace, id));
CREATE TABLE IF NOT EXISTS experience_skills (
    namespace TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
    episode_id TEXT NOT NULL, parameters TEXT NOT NULL, steps TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (namespace, id));
CREATE TABLE IF NOT EXISTS experience_schedules (
    namespace TEXT NOT NULL, skill_id TEXT NOT NULL, every_minutes INTEGER NOT NULL,
    next_due REAL NOT NULL, last_run REAL, PRIMARY KEY (namespace, skill_id));
CREATE TABLE IF NOT EXISTS experience_runs (
    namespace TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, skill_id TEXT,
    title TEXT NOT NULL, params TEXT NOT NULL, plan TEXT NOT NULL, status TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, note TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, id));
CREATE INDEX IF NOT EXISTS experience_runs_seq ON experience_runs (namespace, seq);
CREATE TABLE IF NOT EXISTS experience_steps (
    namespace TEXT NOT NULL, owner TEXT NOT NULL, idx INTEGER NOT NULL, action TEXT NOT NULL,
    args TEXT NOT NULL, result TEXT NOT NULL, irreversible INTEGER NOT NULL,
    ok INTEGER NOT NULL, approved INTEGER NOT NULL, at REAL NOT NULL, learned_at REAL,
    PRIMARY KEY (namespace, owner, idx));
CREATE TABLE IF NOT EXISTS experience_audit (
    namespace TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL,
    event TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (namespace, run_id, seq));
"""
TABLES = ("episodes", "skills", "schedules", "runs", "steps", "audit")


@dataclass(frozen=True)
class RecordedStep:
    """A stored step: its place, what it did, and when."""

    index: int
    step: Step
    ok: bool
    approved: bool
    at: float
    learned: bool


@dataclass(frozen=True)
class Episode:
    """A recorded demonstration."""

    id: str
    title: str
    created_at: float
    steps: list[RecordedStep]
    secrets_removed: int = 0


@dataclass(frozen=True)
class Schedule:
    """When a skill is due: every ``every_minutes``, next at ``next_due`` (epoch seconds)."""

    skill_id: str
    every_minutes: int
    next_due: float
    last_run: float | None


@dataclass(frozen=True)
class Skill:
    """A skill compiled from an episode."""

    id: str
    name: str
    description: str
    episode_id: str
    parameters: tuple[Parameter, ...]
    steps: tuple[Step, ...]
    created_at: float
    schedule: Schedule | None = None


@dataclass(frozen=True)
class AuditEvent:
    """One line of a run's audit trail."""

    seq: int
    at: float
    event: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class Run:
    """A run of a skill (or of free steps) with what was done and its audit trail."""

    id: str
    skill_id: str | None
    title: str
    status: str
    params: dict[str, Any]
    plan: list[Step]
    started_at: float
    finished_at: float | None
    note: str
    steps: list[RecordedStep] = field(default_factory=list)
    audit: list[AuditEvent] = field(default_factory=list)


@dataclass(frozen=True)
class LearnableStep:
    """A step not learned yet, with the task it belongs to (what training renders)."""

    owner: str
    index: int
    task: str
    step: Step


def parse_step(data: Mapping[str, Any], where: str) -> Step:
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: expected an object {{action, args, result, irreversible}}")
    action = data.get("action")
    if not isinstance(action, str) or not action.strip() or len(action) > 200:
        raise InputError(
            f"{where}: expected 'action', a name of 1-200 characters, got {action!r}; hint: "
            "the tool or command the step ran, e.g. 'git.push'"
        )
    args = data.get("args") or {}
    if not isinstance(args, Mapping):
        raise InputError(f"{where}: 'args' must be an object, got {type(args).__name__}")
    result = data.get("result") or ""
    if not isinstance(result, str) or len(result) > MAX_TEXT:
        raise InputError(f"{where}: 'result' must be text of at most {MAX_TEXT} characters")
    irreversible = data.get("irreversible", False)
    if not isinstance(irreversible, bool):
        raise InputError(f"{where}: 'irreversible' must be true or false, got {irreversible!r}")
    return Step(action.strip(), dict(args), result, irreversible)


def cron_minutes(spec: str) -> int:
    """The interval of a cron-like ``spec``: ``*/N * * * *``, ``@hourly`` or ``@daily``.

    Raises:
        InputError: Any other form (only every-N-minutes schedules are kept).
    """
    text = " ".join(str(spec).split())
    named = {"@hourly": 60, "@daily": 1440, "* * * * *": 1}
    if text in named:
        return named[text]
    head, _, rest = text.partition(" ")
    if rest == "* * * *" and head.startswith("*/") and head[2:].isdigit() and int(head[2:]) > 0:
        return int(head[2:])
    raise InputError(
        f"skill_schedule: cron {spec!r} is not an every-N-minutes schedule; expected "
        "'*/N * * * *', '@hourly' or '@daily'; hint: or pass every_minutes"
    )


def new_id(kind: str) -> str:
    """A fresh id such as ``run-1f2e3d4c5b6a`` (never shaped like a key: no ``sk-``)."""
    return f"{kind}-{uuid.uuid4().hex[:12]}"


class ExperienceDB:
    """The connection and shared reads of one namespace's experience (see ExperienceStore).

    Args:
        path: The memory file (created if missing) or ``":memory:"``.
        namespace: The store namespace (tenant) every row is scoped to.
        max_runs: Runs kept; starting one more prunes the oldest.
        clock: Epoch seconds (injectable for tests).

    Raises:
        ConfigError: ``namespace`` is empty or ``max_runs`` is not a positive integer.
        StorageError: The file cannot be opened as a database.
    """

    def __init__(
        self,
        path: str | Path,
        namespace: str,
        *,
        max_runs: int = DEFAULT_MAX_RUNS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError(f"ExperienceStore: namespace must be non-empty, got {namespace!r}")
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ConfigError(f"ExperienceStore: max_runs must be >= 1, got {max_runs!r}")
        self.path, self.namespace, self.max_runs, self.clock = str(path), namespace, max_runs, clock
        self._lock = threading.Lock()
        # A file is opened per operation (cheap; nothing to close, several processes share
        # it); ":memory:" exists only as long as its one connection.
        self._memory: sqlite3.Connection | None = None
        try:
            if self.path == ":memory:":
                self._memory = self._open()
                self._memory.executescript(_SCHEMA)
            else:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                with contextlib.closing(self._open()) as conn:
                    conn.execute("PRAGMA journal_mode = WAL")
                    conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise StorageError(
                f"experience: cannot open {self.path!r}: {err}; hint: point --memory-file at "
                "a file evermind wrote"
            ) from err

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 10000")
        return conn

    def close(self) -> None:
        """Closes the in-memory database (a file needs no closing)."""
        with self._lock:
            if self._memory is not None:
                self._memory.close()

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._memory is not None:
                yield self._memory
                return
            conn = self._open()
            try:
                yield conn
            finally:
                conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: all of a write or none of it.

        Raises:
            StorageError: SQLite failed (the transaction is rolled back).
        """
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except sqlite3.Error as err:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StorageError(f"experience: write to {self.path!r} failed: {err}") from err
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one query whose first parameter is this namespace.

        Raises:
            StorageError: SQLite failed.
        """
        with self._connection() as conn:
            try:
                return conn.execute(sql, (self.namespace, *args)).fetchall()
            except sqlite3.Error as err:
                raise StorageError(f"experience: read of {self.path!r} failed: {err}") from err

    # -- steps ----------------------------------------------------------------------------
    def _insert_step(
        self,
        conn: sqlite3.Connection,
        owner: str,
        index: int,
        step: Step,
        ok: bool = True,
        approved: bool = False,
    ) -> RecordedStep:
        at = self.clock()
        conn.execute(
            "INSERT INTO experience_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
            (
                self.namespace,
                owner,
                index,
                step.action,
                json.dumps(step.args),
                step.result,
                int(step.irreversible),
                int(ok),
                int(approved),
                at,
            ),
        )
        return RecordedStep(index, step, ok, approved, at, False)

    def _steps(self, owner: str) -> list[RecordedStep]:
        rows = self._read(
            "SELECT idx, action, args, result, irreversible, ok, approved, at, learned_at "
            "FROM experience_steps WHERE namespace = ? AND owner = ? ORDER BY idx",
            (owner,),
        )
        return [
            RecordedStep(
                r[0],
                Step(r[1], json.loads(r[2]), r[3], bool(r[4])),
                bool(r[5]),
                bool(r[6]),
                r[7],
                r[8] is not None,
            )
            for r in rows
        ]

    def _skill_of(self, row: Sequence[Any]) -> Skill:
        params = tuple(Parameter.from_dict(p) for p in json.loads(row[5]))
        steps = tuple(
            Step(s["action"], s["args"], "", bool(s["irreversible"])) for s in json.loads(row[6])
        )
        sched = self._read(
            "SELECT skill_id, every_minutes, next_due, last_run FROM experience_schedules "
            "WHERE namespace = ? AND skill_id = ?",
            (row[0],),
        )
        return Skill(
            row[0],
            row[1],
            row[2],
            row[3],
            params,
            steps,
            row[4],
            Schedule(*sched[0]) if sched else None,
        )

    _SKILL_COLUMNS = "id, name, description, episode_id, created_at, parameters, steps"

    def skill(self, skill_id: str) -> Skill:
        """The skill with the id.

        Raises:
            NotFound: No skill of this namespace has the id.
        """
        rows = self._read(
            f"SELECT {self._SKILL_COLUMNS} FROM experience_skills WHERE namespace = ? AND id = ?",
            (skill_id,),
        )
        if not rows:
            raise NotFound(
                f"skill {skill_id!r} not found; hint: skill_list shows this tenant's ids"
            )
        return self._skill_of(rows[0])

    def _audit(self, conn: sqlite3.Connection, run_id: str, event: str, **detail: Any) -> None:
        row = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM experience_audit WHERE namespace = ? AND "
            "run_id = ?",
            (self.namespace, run_id),
        ).fetchone()
        conn.execute(
            "INSERT INTO experience_audit VALUES (?, ?, ?, ?, ?, ?)",
            (self.namespace, run_id, row[0], self.clock(), event, json.dumps(detail)),
        )


__all__ = [
    "DEFAULT_MAX_RUNS",
    "FORGET_ALL_CONFIRM",
    "MAX_STEPS",
    "MAX_TEXT",
    "RUN_STATUSES",
    "TABLES",
    "AuditEvent",
    "Episode",
    "ExperienceDB",
    "LearnableStep",
    "RecordedStep",
    "Run",
    "Schedule",
    "Skill",
    "cron_minutes",
    "new_id",
    "parse_step",
]
