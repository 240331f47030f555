"""The experience store: episodes, skills, schedules and audited runs in SQLite (native-only).

Owns :class:`ExperienceStore`, the opt-in record of what an agent did (``EVERMIND_EXPERIENCE=1``
on the MCP server). It lives in the memory file (its own ``experience_*`` tables, one
connection of its own; ``":memory:"`` keeps it in memory) and every row carries the store
namespace (the tenant), so one tenant never reads another's experience.

- **Episodes**: a recorded demonstration, a title and its steps (``action``, ``args``,
  ``result``, ``irreversible``). Secrets in the arguments are replaced by markers and
  secrets in results are masked before anything is written (``evermind.memory.skills``).
- **Skills**: compiled from an episode (typed literals become parameters, secrets required
  parameters, irreversible steps marked); a skill may be scheduled every N minutes and
  :meth:`ExperienceStore.due` lists the skills due at a time.
- **Runs**: a skill's plan (or free steps) executed by the agent and recorded step by step,
  with an audit trail (started, each step, each refusal, finished; all timestamped). An
  irreversible step is refused unless approved. Only the newest ``max_runs`` runs of a
  namespace are kept (500 by default); older ones are pruned with their steps and audit.
- **Learned marks**: each episode and run step is marked once a training run has used it, so
  ``experience_train`` trains only on what is new.
"""

from __future__ import annotations

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

from evermind.errors import (
    AccessError,
    ConfigError,
    Conflict,
    InputError,
    NotFound,
    StorageError,
)
from evermind.memory.skills import (
    CompiledSkill,
    Parameter,
    Step,
    bind_parameters,
    compile_skill,
    redact_args,
    redact_text,
    resolve_steps,
)

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
_TABLES = ("episodes", "skills", "schedules", "runs", "steps", "audit")


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


def _step_of(data: Mapping[str, Any], where: str) -> Step:
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


def _new_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:12]}"


class ExperienceStore:
    """Episodes, skills, schedules and runs of one namespace in a SQLite file.

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
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout = 10000")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise StorageError(
                f"experience: cannot open {self.path!r}: {err}; hint: point --memory-file at "
                "a file evermind wrote"
            ) from err

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: all of a write or none of it."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except sqlite3.Error as err:
                conn.execute("ROLLBACK")
                raise StorageError(f"experience: write to {self.path!r} failed: {err}") from err
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, (self.namespace, *args)).fetchall()

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

    # -- episodes -------------------------------------------------------------------------
    def save_episode(self, title: str, steps: Sequence[Mapping[str, Any]]) -> Episode:
        """Records a demonstration; secrets in its steps are removed before it is written.

        Raises:
            InputError: The title is empty, there are no (or too many) steps, or a step is
                malformed.
        """
        if not isinstance(title, str) or not title.strip() or len(title) > 500:
            raise InputError(f"episode: expected a title of 1-500 characters, got {title!r}")
        if not steps or len(steps) > MAX_STEPS:
            raise InputError(f"episode: expected 1-{MAX_STEPS} steps, got {len(steps)}")
        parsed, removed = [], 0
        for n, raw in enumerate(steps, start=1):
            step = _step_of(raw, f"episode step {n}")
            args, found = redact_args(step.args)
            result = redact_text(step.result)
            removed += found + (result != step.result)
            parsed.append(Step(step.action, args, result, step.irreversible))
        episode_id, now = _new_id("ep"), self.clock()
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO experience_episodes VALUES (?, ?, ?, ?)",
                (self.namespace, episode_id, redact_text(title.strip()), now),
            )
            recorded = [
                self._insert_step(conn, f"episode:{episode_id}", i, s) for i, s in enumerate(parsed)
            ]
        return Episode(episode_id, redact_text(title.strip()), now, recorded, removed)

    def episodes(self, limit: int = 50) -> list[tuple[Episode, int]]:
        """The newest episodes (without steps) and their step counts."""
        rows = self._read(
            "SELECT e.id, e.title, e.created_at, (SELECT COUNT(*) FROM experience_steps s WHERE "
            "s.namespace = e.namespace AND s.owner = 'episode:' || e.id) FROM experience_episodes "
            "e WHERE e.namespace = ? ORDER BY e.created_at DESC, e.rowid DESC LIMIT ?",
            (limit,),
        )
        return [(Episode(r[0], r[1], r[2], []), int(r[3])) for r in rows]

    def episode(self, episode_id: str) -> Episode:
        """The episode with its steps.

        Raises:
            NotFound: No episode of this namespace has the id.
        """
        rows = self._read(
            "SELECT id, title, created_at FROM experience_episodes WHERE namespace = ? AND id = ?",
            (episode_id,),
        )
        if not rows:
            raise NotFound(
                f"episode {episode_id!r} not found; hint: episode_list shows this tenant's ids"
            )
        return Episode(rows[0][0], rows[0][1], rows[0][2], self._steps(f"episode:{episode_id}"))

    def forget_episode(self, episode_id: str) -> bool:
        """Deletes an episode and its steps (skills compiled from it keep working)."""
        with self._tx() as conn:
            gone = conn.execute(
                "DELETE FROM experience_episodes WHERE namespace = ? AND id = ?",
                (self.namespace, episode_id),
            ).rowcount
            conn.execute(
                "DELETE FROM experience_steps WHERE namespace = ? AND owner = ?",
                (self.namespace, f"episode:{episode_id}"),
            )
        return gone > 0

    # -- skills ---------------------------------------------------------------------------
    def preview_skill(self, episode_id: str) -> CompiledSkill:
        """What :meth:`compile_skill` would make of the episode (nothing is written)."""
        return compile_skill([s.step for s in self.episode(episode_id).steps])

    def compile_skill(self, episode_id: str, name: str, description: str = "") -> Skill:
        """Compiles the episode into a stored skill.

        Raises:
            NotFound: The episode does not exist.
            InputError: The name is empty.
        """
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise InputError(f"skill: expected a name of 1-200 characters, got {name!r}")
        compiled = self.preview_skill(episode_id)
        skill_id, now = _new_id("skill"), self.clock()
        steps = [
            {"action": s.action, "args": s.args, "irreversible": s.irreversible}
            for s in compiled.steps
        ]
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO experience_skills VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.namespace,
                    skill_id,
                    name.strip(),
                    redact_text(description),
                    episode_id,
                    json.dumps([p.to_dict() for p in compiled.parameters]),
                    json.dumps(steps),
                    now,
                ),
            )
        return self.skill(skill_id)

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

    def skills(self) -> list[Skill]:
        """Every skill, newest first."""
        rows = self._read(
            f"SELECT {self._SKILL_COLUMNS} FROM experience_skills WHERE namespace = ? "
            "ORDER BY created_at DESC, rowid DESC"
        )
        return [self._skill_of(r) for r in rows]

    def forget_skill(self, skill_id: str) -> bool:
        """Deletes a skill and its schedule (its past runs stay in the audit)."""
        with self._tx() as conn:
            gone = conn.execute(
                "DELETE FROM experience_skills WHERE namespace = ? AND id = ?",
                (self.namespace, skill_id),
            ).rowcount
            conn.execute(
                "DELETE FROM experience_schedules WHERE namespace = ? AND skill_id = ?",
                (self.namespace, skill_id),
            )
        return gone > 0

    def schedule(self, skill_id: str, every_minutes: int | None) -> Schedule | None:
        """Makes the skill due every ``every_minutes`` from now (None: unscheduled).

        Raises:
            NotFound: The skill does not exist.
            InputError: ``every_minutes`` is not a positive integer.
        """
        self.skill(skill_id)
        with self._tx() as conn:
            conn.execute(
                "DELETE FROM experience_schedules WHERE namespace = ? AND skill_id = ?",
                (self.namespace, skill_id),
            )
            if every_minutes is None:
                return None
            if (
                isinstance(every_minutes, bool)
                or not isinstance(every_minutes, int)
                or (not 1 <= every_minutes <= 525_600)
            ):
                raise InputError(
                    f"skill_schedule: expected every_minutes in 1..525600, got {every_minutes!r}"
                )
            due = self.clock() + every_minutes * 60.0
            conn.execute(
                "INSERT INTO experience_schedules VALUES (?, ?, ?, ?, NULL)",
                (self.namespace, skill_id, every_minutes, due),
            )
        return Schedule(skill_id, every_minutes, due, None)

    def due(self, now: float | None = None) -> list[Skill]:
        """The scheduled skills whose next time is at or before ``now`` (default: the clock)."""
        moment = self.clock() if now is None else now
        rows = self._read(
            "SELECT skill_id FROM experience_schedules WHERE namespace = ? AND next_due <= ? "
            "ORDER BY next_due",
            (moment,),
        )
        return [self.skill(r[0]) for r in rows]

    # -- runs -----------------------------------------------------------------------------
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

    def start_run(
        self,
        skill_id: str | None = None,
        title: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Run:
        """Starts a run of ``skill_id`` with ``params`` (or, without a skill, of free steps).

        Secret parameters are checked and shown as ``***``; their values are never written.
        Starting a run prunes the namespace's runs beyond ``max_runs`` and moves the skill's
        schedule on.

        Raises:
            NotFound: The skill does not exist.
            InputError: A parameter is unknown, mistyped or missing; neither a skill nor a
                title was given.
        """
        plan: list[Step] = []
        shown: dict[str, Any] = {}
        if skill_id is not None:
            skill = self.skill(skill_id)
            bound = bind_parameters(skill.parameters, params)
            secret = {p.name for p in skill.parameters if p.type == "secret"}
            shown = {k: "***" if k in secret else v for k, v in bound.items()}
            plan = resolve_steps(skill.steps, skill.parameters, bound)
            title = title or skill.name
        elif params:
            raise InputError("run_start: params need a skill_id; hint: pass skill_id")
        if not title or not isinstance(title, str) or len(title) > 500:
            raise InputError(
                f"run_start: expected a skill_id or a title of 1-500 characters, got {title!r}"
            )
        run_id, now = _new_id("run"), self.clock()
        plan_json = [
            {"action": s.action, "args": s.args, "irreversible": s.irreversible} for s in plan
        ]
        with self._tx() as conn:
            seq = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM experience_runs WHERE namespace = ?",
                (self.namespace,),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO experience_runs VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, NULL, '')",
                (
                    self.namespace,
                    run_id,
                    seq,
                    skill_id,
                    redact_text(title),
                    json.dumps(shown),
                    json.dumps(plan_json),
                    now,
                ),
            )
            self._audit(conn, run_id, "started", skill_id=skill_id, params=shown)
            if skill_id is not None:
                conn.execute(
                    "UPDATE experience_schedules SET last_run = ?, next_due = ? + every_minutes "
                    "* 60.0 WHERE namespace = ? AND skill_id = ?",
                    (now, now, self.namespace, skill_id),
                )
            self._prune(conn, seq)
        return self.run(run_id)

    def _prune(self, conn: sqlite3.Connection, newest: int) -> None:
        old = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM experience_runs WHERE namespace = ? AND seq <= ?",
                (self.namespace, newest - self.max_runs),
            )
        ]
        for run_id in old:
            for sql in (
                "DELETE FROM experience_runs WHERE namespace = ? AND id = ?",
                "DELETE FROM experience_audit WHERE namespace = ? AND run_id = ?",
            ):
                conn.execute(sql, (self.namespace, run_id))
            conn.execute(
                "DELETE FROM experience_steps WHERE namespace = ? AND owner = ?",
                (self.namespace, f"run:{run_id}"),
            )

    def _run_row(self, run_id: str) -> tuple[Any, ...]:
        rows = self._read(
            "SELECT id, skill_id, title, status, params, plan, started_at, finished_at, note "
            "FROM experience_runs WHERE namespace = ? AND id = ?",
            (run_id,),
        )
        if not rows:
            raise NotFound(
                f"run {run_id!r} not found (or pruned: the newest {self.max_runs} are kept); "
                "hint: run_list shows this tenant's runs"
            )
        return rows[0]

    def run(self, run_id: str) -> Run:
        """The run with its steps and audit trail.

        Raises:
            NotFound: No run of this namespace has the id (it may have been pruned).
        """
        r = self._run_row(run_id)
        plan = [Step(s["action"], s["args"], "", bool(s["irreversible"])) for s in json.loads(r[5])]
        audit = [
            AuditEvent(a[0], a[1], a[2], json.loads(a[3]))
            for a in self._read(
                "SELECT seq, at, event, detail FROM experience_audit WHERE namespace = ? AND "
                "run_id = ? ORDER BY seq",
                (run_id,),
            )
        ]
        return Run(
            r[0],
            r[1],
            r[2],
            r[3],
            json.loads(r[4]),
            plan,
            r[6],
            r[7],
            r[8],
            self._steps(f"run:{run_id}"),
            audit,
        )

    def runs(self, limit: int = 20, status: str | None = None) -> list[Run]:
        """The newest runs (without steps and audit), optionally of one status."""
        where, args = ("AND status = ? ", (status, limit)) if status else ("", (limit,))
        rows = self._read(
            f"SELECT id FROM experience_runs WHERE namespace = ? {where}ORDER BY seq DESC LIMIT ?",
            args,
        )
        out = []
        for (run_id,) in rows:
            r = self._run_row(run_id)
            out.append(Run(r[0], r[1], r[2], r[3], json.loads(r[4]), [], r[6], r[7], r[8]))
        return out

    def record_step(
        self,
        run_id: str,
        result: str = "",
        *,
        action: str | None = None,
        args: Mapping[str, Any] | None = None,
        ok: bool = True,
        irreversible: bool = False,
        approved: bool = False,
    ) -> RecordedStep:
        """Records the run's next step (a skill run: the next step of its plan).

        Raises:
            NotFound: The run does not exist.
            Conflict: The run is finished, or its plan has no step left.
            InputError: The step is malformed or is not the plan's next action.
            AccessError: The step is irreversible and ``approved`` is not true (the refusal
                is written to the audit trail; no step is recorded).
        """
        run = self.run(run_id)
        if run.status != "running":
            raise Conflict(f"run {run_id!r} is {run.status}; hint: start a new run with run_start")
        index = len(run.steps)
        if run.skill_id is not None:
            if index >= len(run.plan):
                raise Conflict(
                    f"run {run_id!r}: all {len(run.plan)} planned steps are recorded; hint: call "
                    "run_finish"
                )
            planned = run.plan[index]
            if action is not None and action != planned.action:
                raise InputError(
                    f"run {run_id!r} step {index + 1}: the plan's action is {planned.action!r}, "
                    f"got {action!r}; hint: follow the plan, or finish the run as failed"
                )
            step = Step(planned.action, planned.args, result, planned.irreversible)
        else:
            step = _step_of(
                {"action": action, "args": args, "result": result, "irreversible": irreversible},
                f"run {run_id!r} step {index + 1}",
            )
        safe_args, _ = redact_args(step.args)
        step = Step(step.action, safe_args, redact_text(step.result), step.irreversible)
        if step.irreversible and approved is not True:
            with self._tx() as conn:
                self._audit(
                    conn,
                    run_id,
                    "refused",
                    step=index + 1,
                    action=step.action,
                    reason="irreversible step without approval",
                )
            raise AccessError(
                f"run {run_id!r} step {index + 1} ({step.action}) is irreversible and was not "
                "approved; nothing was recorded; hint: ask the user, then call run_step again "
                "with approved=true"
            )
        with self._tx() as conn:
            recorded = self._insert_step(conn, f"run:{run_id}", index, step, ok, approved)
            self._audit(
                conn,
                run_id,
                "step",
                step=index + 1,
                action=step.action,
                ok=ok,
                approved=approved,
                irreversible=step.irreversible,
            )
        return recorded

    def finish_run(self, run_id: str, status: str, note: str = "") -> Run:
        """Ends the run as ``succeeded``, ``failed`` or ``cancelled``.

        Raises:
            NotFound: The run does not exist.
            Conflict: It is already finished, or it would succeed with planned steps missing.
            InputError: ``status`` is not one of the three.
        """
        if status not in RUN_STATUSES:
            raise InputError(f"run_finish: status must be one of {RUN_STATUSES}, got {status!r}")
        run = self.run(run_id)
        if run.status != "running":
            raise Conflict(f"run {run_id!r} is already {run.status}")
        if status == "succeeded" and run.skill_id is not None and len(run.steps) < len(run.plan):
            raise Conflict(
                f"run {run_id!r}: {len(run.steps)} of {len(run.plan)} planned steps recorded, so "
                "it cannot have succeeded; hint: record the rest, or finish it as failed"
            )
        with self._tx() as conn:
            conn.execute(
                "UPDATE experience_runs SET status = ?, finished_at = ?, note = ? WHERE "
                "namespace = ? AND id = ?",
                (status, self.clock(), redact_text(note), self.namespace, run_id),
            )
            self._audit(conn, run_id, "finished", status=status, steps=len(run.steps))
        return self.run(run_id)

    # -- learning -------------------------------------------------------------------------
    def unlearned(self) -> list[LearnableStep]:
        """Steps not used by a training yet: every episode step, and the ok steps of runs."""
        rows = self._read(
            "SELECT s.owner, s.idx, s.action, s.args, s.result, s.irreversible, "
            "COALESCE(e.title, r.title, '') FROM experience_steps s "
            "LEFT JOIN experience_episodes e ON e.namespace = s.namespace AND "
            "s.owner = 'episode:' || e.id "
            "LEFT JOIN experience_runs r ON r.namespace = s.namespace AND s.owner = 'run:' || r.id "
            "WHERE s.namespace = ? AND s.learned_at IS NULL AND s.ok = 1 ORDER BY s.at, s.idx"
        )
        return [
            LearnableStep(r[0], r[1], r[6], Step(r[2], json.loads(r[3]), r[4], bool(r[5])))
            for r in rows
        ]

    def mark_learned(self, steps: Sequence[LearnableStep]) -> int:
        """Marks ``steps`` learned (a training used them); returns how many were marked."""
        now = self.clock()
        with self._tx() as conn:
            return sum(
                conn.execute(
                    "UPDATE experience_steps SET learned_at = ? WHERE namespace = ? AND owner = ? "
                    "AND idx = ? AND learned_at IS NULL",
                    (now, self.namespace, s.owner, s.index),
                ).rowcount
                for s in steps
            )

    # -- the whole namespace ----------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Counts of this namespace's experience."""
        counts = {
            t: self._read(f"SELECT COUNT(*) FROM experience_{t} WHERE namespace = ?")[0][0]
            for t in _TABLES
        }
        by_status = dict(
            self._read(
                "SELECT status, COUNT(*) FROM experience_runs WHERE namespace = ? GROUP BY status"
            )
        )
        learned = self._read(
            "SELECT COUNT(*) FROM experience_steps WHERE namespace = ? AND learned_at IS NOT NULL"
        )[0][0]
        return {
            "namespace": self.namespace,
            "episodes": counts["episodes"],
            "skills": counts["skills"],
            "schedules": counts["schedules"],
            "runs": counts["runs"],
            "runs_by_status": by_status,
            "max_runs": self.max_runs,
            "steps": counts["steps"],
            "steps_learned": learned,
            "steps_to_learn": len(self.unlearned()),
        }

    def forget_all(self, confirm: str) -> dict[str, int]:
        """Deletes every episode, skill, schedule, run, step and audit line of this namespace.

        Raises:
            InputError: ``confirm`` is not exactly :data:`FORGET_ALL_CONFIRM`.
        """
        if confirm != FORGET_ALL_CONFIRM:
            raise InputError(
                f"experience_forget_all: nothing deleted; confirm must be exactly "
                f"{FORGET_ALL_CONFIRM!r}, got {confirm!r}; hint: ask the user first"
            )
        with self._tx() as conn:
            return {
                t: conn.execute(
                    f"DELETE FROM experience_{t} WHERE namespace = ?", (self.namespace,)
                ).rowcount
                for t in _TABLES
            }


__all__ = [
    "DEFAULT_MAX_RUNS",
    "FORGET_ALL_CONFIRM",
    "RUN_STATUSES",
    "AuditEvent",
    "Episode",
    "ExperienceStore",
    "LearnableStep",
    "RecordedStep",
    "Run",
    "Schedule",
    "Skill",
    "cron_minutes",
]
