"""AgentGraph on Postgres: the unit suite's behaviours, the SIGKILL proof, and two writers.

Postgres is the session's one pgserver (the ``postgres`` fixture of conftest.py); each test
gets its own database, so thread ids never meet.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from evermind.agent.graph import Checkpoint, open_checkpointer
from evermind.agent.graph.postgres import PostgresCheckpointer
from evermind.errors import Conflict, StoreUnavailable
from tests.unit.test_agent_graph import (  # noqa: F401 - collected again with our fixture
    test_a_bad_update_is_not_kept_so_the_fixed_node_resumes,
    test_a_failed_node_keeps_its_siblings_work_for_the_resume,
    test_a_join_waits_for_its_slowest_branch,
    test_a_node_is_retried_in_its_step_and_then_fails,
    test_a_router_may_fan_out_through_a_mapping,
    test_a_superstep_runs_its_nodes_on_the_state_at_its_start,
    test_conditional_edges_route_on_the_merged_state,
    test_fork_from_a_checkpoint_diverges_without_touching_the_original,
    test_interrupt_after_checkpoints_the_step_then_pauses,
    test_interrupt_asks_a_human_and_resume_answers,
    test_interrupt_before_pauses_and_resume_goes_on,
    test_the_step_limit_stops_a_loop_and_the_thread_resumes,
    test_two_writes_to_a_key_without_reducer_name_the_key_and_nodes,
    test_update_state_writes_a_checkpoint_the_run_goes_on_from,
)
from tests.unit.test_agent_graph_durable import kill_mid_superstep_and_resume


@pytest.fixture
def database(postgres: str) -> Iterator[str]:
    """The URL of a fresh database on the session's server, dropped after the test."""
    name = f"graph_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(postgres)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def store(database: str) -> Iterator[Any]:
    opened = open_checkpointer(database)
    assert isinstance(opened, PostgresCheckpointer)
    yield opened
    opened.close()


def test_a_run_killed_mid_superstep_resumes_on_postgres(tmp_path: Path, database: str) -> None:
    kill_mid_superstep_and_resume(tmp_path, database)


def test_two_writers_cannot_both_extend_a_thread(database: str) -> None:
    first, second = PostgresCheckpointer(database), PostgresCheckpointer(database)
    try:
        root = Checkpoint("t", "c0", "", -1, {"x": 1}, ["a"])
        first.put(root)
        first.put(Checkpoint("t", "c1", "c0", 0, {"x": 2}, []))
        with pytest.raises(Conflict, match="moved on past checkpoint 'c0'"):
            second.put(Checkpoint("t", "c1b", "c0", 0, {"x": 3}, []))
        latest = second.latest("t")
        assert latest is not None and latest.values == {"x": 2}
        assert [c.checkpoint_id for c in second.history("t")] == ["c1", "c0"]
        assert second.threads() == ["t"]
    finally:
        first.close()
        second.close()


def test_an_unreachable_server_is_one_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot open the checkpoint store"):
        PostgresCheckpointer("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
