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
from collections.abc import Mapping, Sequence
from typing import Any

from evermind.errors import InputError, NotFound
from evermind.memory.experience_db import (
    DEFAULT_MAX_RUNS,
    FORGET_ALL_CONFIRM,
    MAX_STEPS,
    RUN_STATUSES,
    TABLES,
    AuditEvent,
    Episode,
    LearnableStep,
    RecordedStep,
    Run,
    Schedule,
    Skill,
    cron_minutes,
    new_id,
    parse_step,
)
from evermind.memory.experience_runs import RunLog
from evermind.memory.skills import CompiledSkill, Step, compile_skill, redact_args, redact_text


class ExperienceStore(RunLog):
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
            step = parse_step(raw, f"episode step {n}")
            args, found = redact_args(step.args)
            result = redact_text(step.result)
            removed += found + (result != step.result)
            parsed.append(Step(step.action, args, result, step.irreversible))
        episode_id, now = new_id("ep"), self.clock()
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
        skill_id, now = new_id("skill"), self.clock()
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
                    redact_text(name.strip()),
                    redact_text(description),
                    episode_id,
                    json.dumps([p.to_dict() for p in compiled.parameters]),
                    json.dumps(steps),
                    now,
                ),
            )
        return self.skill(skill_id)

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
            for t in TABLES
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
                for t in TABLES
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
