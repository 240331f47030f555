"""One suite, every engine: the in-process store (memory and SQLite), Postgres + pgvector, Qdrant,
and the Pinecone REST dialect.

Each test runs once per engine and must give the same answer on all of them: exact top-k equal
to a numpy scan, every filter operator equal to the Python evaluator, tenancy enforced (a
Hypothesis property over random items, ACLs, scopes and filters), bad input refused with the
same error. Postgres is a real server (pgserver: PostgreSQL 16 with pgvector; the session's
``postgres`` fixture of tests/runtime/conftest.py); Qdrant runs in qdrant-client's local mode;
Pinecone is a loopback server speaking its documented data-plane API
(``tests/runtime/pinecone_server.py``), one index for the session. Each test gets its own
table / collection / namespace.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import threading
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evermind
from evermind.errors import ConfigError, InputError, ShapeError
from evermind.evaluation import Case, GraderMinimum, Outcome, RecallAtK, check_gates, run_eval
from evermind.vectorstore import (
    AccessScope,
    Acl,
    And,
    Eq,
    Exists,
    Filter,
    In,
    Not,
    Or,
    Range,
    ScopeRequired,
    VectorItem,
    evaluate,
    open_store,
    visible,
)
from tests import procs
from tests.runtime.helpers import ServerProcess
from tests.runtime.pinecone_server import PineconeServer

T = TypeVar("T")
DIM = 12
ENGINES = ["memory", "sqlite", "pgvector", "qdrant", "pinecone", "evermind"]
EVERMIND_TOKEN = "tok-acme-vectors-5e1f"
PINECONE_KEY = "pc-test-key-0123456789"
SCOPE = AccessScope("acme", frozenset({"alice"}), 1)
ACL = Acl("acme", frozenset({"alice"}), 0)


class Loop:
    """One event loop on a thread for the whole session, so a store outlives one coroutine
    (Hypothesis runs many examples against one store)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="session")
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def pinecone() -> Iterator[PineconeServer]:
    """ONE loopback Pinecone index of dimension ``DIM`` for the session (stopped at the end)."""
    server = PineconeServer(DIM, api_key=PINECONE_KEY)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def evermind_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """ONE ``evermind serve`` for the session (its /v1/vectors routes; tenant acme's token)."""
    root = tmp_path_factory.mktemp("evermind-vectors")
    tokens = root / "tokens.txt"
    tokens.write_text(f"{EVERMIND_TOKEN} acme write\n", encoding="utf-8")
    server = ServerProcess(root / "data", tokens, root / "serve.log").start()
    try:
        yield server
    finally:
        server.stop()


def _one_tenant(url: str) -> None:
    """The evermind dialect's URL carries one tenant's token: a test storing items of several
    tenants in one store does not apply (tests/runtime/test_vectors_route.py proves the
    runtime's tenant isolation instead)."""
    if url.startswith("evermind+"):
        pytest.skip(
            reason="the evermind dialect's URL carries one tenant's token, so a store holding "
            "several tenants' items cannot be built through it; tenant isolation of /v1/vectors "
            "is proven in tests/runtime/test_vectors_route.py"
        )


@pytest.fixture(params=ENGINES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    engine = request.param
    if engine == "memory":
        return "memory://"
    if engine == "sqlite":
        return f"sqlite:///{tmp_path}/vectors.db"
    if engine == "pgvector":
        return str(request.getfixturevalue("postgres"))
    if engine == "evermind":
        runtime = request.getfixturevalue("evermind_runtime")
        return f"evermind+http://:{EVERMIND_TOKEN}@127.0.0.1:{runtime.port}"
    if engine == "pinecone":
        server = request.getfixturevalue("pinecone")
        return f"pinecone+http://:{PINECONE_KEY}@127.0.0.1:{server.port}"
    return f"qdrant+local:///{tmp_path}/qdrant"


@pytest.fixture
def store(url: str, loop: Loop) -> Iterator[Any]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    opened = loop.run(open_store(url, dim=DIM, name=name))
    yield opened
    if hasattr(opened, "drop"):
        loop.run(opened.drop())
    loop.run(opened.close())


def _vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _items(n: int, seed: int = 0, acl: Acl = ACL) -> list[VectorItem]:
    vectors = _vectors(n, seed)
    return [
        VectorItem(f"doc-{i:03d}", vectors[i].tolist(), f"text {i}", {"i": i}, acl)
        for i in range(n)
    ]


def _exact(items: list[VectorItem], query: np.ndarray, k: int) -> list[str]:
    """The numpy exact scan: cosine, best first, ties by id."""
    matrix = np.asarray([it.vector for it in items], dtype=np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = matrix @ (query / np.linalg.norm(query))
    order = sorted(range(len(items)), key=lambda j: (-scores[j], items[j].id))
    return [items[j].id for j in order[:k]]


# -- basics ---------------------------------------------------------------------------------


def test_upsert_overwrite_delete_count(store: Any, loop: Loop) -> None:
    items = _items(20)
    loop.run(store.upsert(items))
    assert loop.run(store.count(scope=SCOPE)) == 20
    changed = VectorItem("doc-003", items[7].vector, "rewritten", {"i": 99, "new": True}, ACL)
    loop.run(store.upsert([changed]))
    assert loop.run(store.count(scope=SCOPE)) == 20, "an upsert of an existing id replaces it"
    hit = loop.run(store.query(items[7].vector, 2, scope=SCOPE))
    assert {h.id for h in hit} == {"doc-003", "doc-007"}
    top = next(h for h in hit if h.id == "doc-003")
    assert top.text == "rewritten" and top.metadata == {"i": 99, "new": True}
    assert math.isclose(top.score, 1.0, abs_tol=1e-5)
    assert loop.run(store.delete(["doc-003", "doc-004", "missing"])) == 2
    assert loop.run(store.count(scope=SCOPE)) == 18
    assert loop.run(store.delete([])) == 0
    ids = {h.id for h in loop.run(store.query(items[3].vector, 50, scope=SCOPE))}
    assert "doc-003" not in ids and len(ids) == 18


def test_exact_top_k_equals_a_numpy_scan(store: Any, loop: Loop) -> None:
    items = _items(300, seed=1)
    for start in range(0, 300, 100):
        loop.run(store.upsert(items[start : start + 100]))
    for query in _vectors(6, seed=2):
        for k in (1, 10, 37):
            got = loop.run(store.query(query.tolist(), k, scope=SCOPE))
            assert [h.id for h in got] == _exact(items, query, k), f"k={k}"
            scores = [h.score for h in got]
            assert scores == sorted(scores, reverse=True)


# -- filters --------------------------------------------------------------------------------

COLORS = ["red", "green", "blue", "Red", "é"]


def _filter_items() -> list[VectorItem]:
    vectors = _vectors(60, seed=3)
    items = []
    for i in range(60):
        meta: dict[str, Any] = {"n": i % 7}
        if i % 3:
            meta["color"] = COLORS[i % 5]
        if i % 4 == 0:
            meta["price"] = i / 4 + 0.5  # a float
        if i % 5 == 0:
            meta["flag"] = i % 10 == 0
        if i % 6 == 0:
            meta["n"] = str(i % 7)  # the same field holding a string: type-strict comparisons
        if i % 11 == 0:
            meta["flag"] = 1  # an int where others hold bools
        items.append(VectorItem(f"f-{i:02d}", vectors[i].tolist(), f"item {i}", meta, ACL))
    return items


FILTERS: list[Any] = [
    Eq("color", "red"),
    Eq("color", "red' OR '1'='1"),  # a value is a parameter, never SQL
    Eq("n", 3),
    Eq("n", 3.0),
    Eq("n", "0"),
    Eq("flag", True),
    Eq("flag", 1),
    Eq("price", 2.5),
    In("color", ("red", "blue")),
    In("n", (1, 2, "0")),
    In("color", ()),
    Range("n", gte=2, lt=5),
    Range("price", gt=3.5),
    Range("price", lte=1.5),
    Range("color", gte="blue", lt="red"),  # strings: a residual on Qdrant
    Range("n", gt="3"),
    Exists("price"),
    Exists("nothing"),
    Not(Exists("color")),
    Not(Eq("color", "red")),
    And((Eq("color", "green"), Range("n", lte=4))),
    Or((Eq("color", "blue"), Exists("price"))),
    Or(()),
    And(()),
    And((Range("color", gt="a"), Not(Eq("flag", True)), Or((Range("n", gt=1), Exists("price"))))),
    Not(Or((Range("color", lt="green"), Eq("n", 0)))),
    {"and": [{"eq": ["color", "red"]}, {"range": ["n", {"gte": 1}]}]},
    {"or": [{"in": ["color", ["green", "é"]]}, {"not": {"exists": "color"}}]},
    {"range": ["price", {"gt": 1, "lte": 7.5}]},
]


def test_every_filter_gives_the_evaluator_s_ids(store: Any, loop: Loop) -> None:
    from evermind.vectorstore import parse_filter

    items = _filter_items()
    loop.run(store.upsert(items))
    query = _vectors(1, seed=4)[0]
    for spec in FILTERS:
        node = parse_filter(spec)
        expected = [it for it in items if evaluate(node, it.metadata)]
        got = loop.run(store.query(query.tolist(), 100, filter=spec, scope=SCOPE))
        assert {h.id for h in got} == {it.id for it in expected}, spec
        assert loop.run(store.count(filter=spec, scope=SCOPE)) == len(expected), spec
        if expected:  # the best few of a filtered set: exact, in order
            small = loop.run(store.query(query.tolist(), 3, filter=spec, scope=SCOPE))
            assert [h.id for h in small] == _exact(expected, query, 3), spec


# -- tenancy --------------------------------------------------------------------------------


def test_a_tenant_never_sees_another_s_items(store: Any, loop: Loop, url: str) -> None:
    _one_tenant(url)
    ours = _items(10, seed=5, acl=Acl("acme", frozenset({"alice", "bob"}), 0))
    theirs = [
        VectorItem(f"other-{i}", it.vector, "secret", {}, Acl("globex", frozenset({"alice"}), 0))
        for i, it in enumerate(ours)
    ]
    secret = [
        VectorItem(f"hi-{i}", it.vector, "classified", {}, Acl("acme", frozenset({"alice"}), 2))
        for i, it in enumerate(ours)
    ]
    loop.run(store.upsert(ours + theirs + secret))
    for scope, expected in [
        (AccessScope("acme", frozenset({"alice"}), 0), 10),
        (AccessScope("acme", frozenset({"carol"}), 5), 0),
        (AccessScope("acme", frozenset({"alice"}), 2), 20),
        (AccessScope("globex", frozenset({"bob"}), 9), 0),
        (AccessScope("globex", frozenset({"alice", "x"}), 0), 10),
        (AccessScope("acme", frozenset(), 9), 0),
    ]:
        hits = loop.run(store.query(ours[0].vector, 100, scope=scope))
        assert all(visible(h.acl, scope) for h in hits)
        assert len(hits) == expected == loop.run(store.count(scope=scope)), scope


FIELDS = ["color", "n", "flag"]
VALUES = st.one_of(
    st.sampled_from(COLORS), st.integers(-2, 4), st.sampled_from([0.5, 2.0, -1.5]), st.booleans()
)
BOUND = st.one_of(st.integers(-2, 4), st.sampled_from(COLORS))
LEAVES = st.one_of(
    st.builds(Eq, st.sampled_from(FIELDS), VALUES),
    st.builds(In, st.sampled_from(FIELDS), st.tuples(VALUES, VALUES)),
    st.builds(
        lambda f, lo, hi: Range(f, gte=lo, lt=hi) if type(lo) is type(hi) else Range(f, gt=lo),
        st.sampled_from(FIELDS),
        BOUND,
        BOUND,
    ),
    st.builds(Exists, st.sampled_from(FIELDS)),
)
FILTER_TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.builds(lambda ps: And(tuple(ps)), st.lists(inner, max_size=3)),
        st.builds(lambda ps: Or(tuple(ps)), st.lists(inner, max_size=3)),
        st.builds(Not, inner),
    ),
    max_leaves=5,
)
PRINCIPALS = st.frozensets(st.sampled_from(["alice", "bob", "carol"]), max_size=3)
ACLS = st.builds(
    Acl, st.sampled_from(["acme", "globex"]), PRINCIPALS.filter(bool), st.integers(0, 2)
)
METAS = st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3)
SCOPES = st.builds(AccessScope, st.sampled_from(["acme", "globex"]), PRINCIPALS, st.integers(0, 2))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    acls=st.lists(st.tuples(ACLS, METAS), min_size=1, max_size=25),
    scope=SCOPES,
    node=st.one_of(st.none(), FILTER_TREES),
    seed=st.integers(0, 1000),
)
def test_property_no_engine_serves_what_the_scope_may_not_see(
    store: Any,
    loop: Loop,
    url: str,
    acls: list[tuple[Acl, dict[str, Any]]],
    scope: AccessScope,
    node: Filter | None,
    seed: int,
) -> None:
    _one_tenant(url)
    vectors = _vectors(len(acls), seed)
    items = [
        VectorItem(f"p-{seed}-{i}", vectors[i].tolist(), "", meta, acl)
        for i, (acl, meta) in enumerate(acls)
    ]
    loop.run(store.upsert(items))
    try:
        expected = {it.id for it in items if visible(it.acl, scope) and evaluate(node, it.metadata)}
        hits = loop.run(store.query(vectors[0].tolist(), 100, filter=node, scope=scope))
        assert all(visible(h.acl, scope) for h in hits), "served an item the scope may not see"
        assert {h.id for h in hits} == expected
        assert loop.run(store.count(filter=node, scope=scope)) == len(expected)
    finally:
        loop.run(store.delete([it.id for it in items]))


# -- bad input ------------------------------------------------------------------------------


def test_bad_input_is_refused_with_a_clear_error(store: Any, loop: Loop) -> None:
    loop.run(store.upsert(_items(3)))
    good = _items(1)[0]
    with pytest.raises(ShapeError, match="has 5 dimensions but the store holds 12"):
        loop.run(store.upsert([VectorItem("x", [1.0] * 5, "", {}, ACL)]))
    with pytest.raises(ShapeError, match="dimensions"):
        loop.run(store.query([1.0] * (DIM + 1), 3, scope=SCOPE))
    with pytest.raises(InputError, match="NaN"):
        loop.run(store.upsert([VectorItem("x", [math.nan] * DIM, "", {}, ACL)]))
    with pytest.raises(InputError, match="NaN"):
        loop.run(store.query([math.nan] * DIM, 3, scope=SCOPE))
    with pytest.raises(InputError, match="all zeros"):
        loop.run(store.query([0.0] * DIM, 3, scope=SCOPE))
    with pytest.raises(InputError, match="has no ACL") as no_acl:
        loop.run(store.upsert([VectorItem("x", good.vector, "", {})]))
    assert no_acl.value.code == "acl_required"
    with pytest.raises(InputError, match="names no principals"):
        loop.run(store.upsert([VectorItem("x", good.vector, "", {}, Acl("acme", frozenset()))]))
    with pytest.raises(InputError, match="unknown operator 'like'") as unknown:
        loop.run(store.query(good.vector, 3, filter={"like": ["color", "r%"]}, scope=SCOPE))
    assert unknown.value.code == "unknown_filter_op"
    with pytest.raises(InputError, match="unknown range bound"):
        loop.run(store.count(filter={"range": ["n", {"between": 1}]}, scope=SCOPE))
    with pytest.raises(InputError, match="not an identifier"):
        loop.run(store.count(filter={"eq": ["a'; DROP TABLE x; --", 1]}, scope=SCOPE))
    with pytest.raises(InputError, match="not a metadata value"):
        loop.run(store.upsert([VectorItem("x", good.vector, "", {"tags": ["a"]}, ACL)]))
    with pytest.raises(InputError, match="appears twice in one batch"):
        loop.run(store.upsert([good, good]))
    with pytest.raises(ScopeRequired, match="needs an AccessScope"):
        loop.run(store.query(good.vector, 3))
    with pytest.raises(ScopeRequired):
        loop.run(store.count())
    with pytest.raises(InputError, match="k must be"):
        loop.run(store.query(good.vector, 0, scope=SCOPE))
    assert loop.run(store.count(scope=SCOPE)) == 3, "a refused batch wrote nothing"


# -- per-engine extras ----------------------------------------------------------------------


def test_unknown_scheme_names_it(loop: Loop) -> None:
    with pytest.raises(ConfigError, match="unknown URL scheme 'redis'") as err:
        loop.run(open_store("redis://localhost", dim=4))
    assert err.value.code == "unknown_store_scheme"


def test_sqlite_store_survives_a_reopen(
    loop: Loop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/v.db"  # four slashes: an absolute path
    assert url.startswith("sqlite:////")
    first = loop.run(open_store(url, dim=DIM))
    loop.run(first.upsert(_items(5)))
    loop.run(first.close())
    again = loop.run(open_store(url, dim=DIM))
    assert loop.run(again.count(scope=SCOPE)) == 5
    loop.run(again.close())
    with pytest.raises(ConfigError, match="dimension 12, not 8"):
        loop.run(open_store(url, dim=8))
    monkeypatch.chdir(tmp_path)
    relative = loop.run(open_store("sqlite:///rel.db", dim=DIM))  # three: relative
    loop.run(relative.close())
    assert (tmp_path / "rel.db").is_file()
    with pytest.raises(ConfigError, match="names no file"):
        loop.run(open_store("sqlite://", dim=DIM))


def test_pgvector_lexical_arm(postgres: str, loop: Loop) -> None:
    store: Any = loop.run(open_store(postgres, dim=DIM, name="lexical"))
    try:
        vectors = _vectors(4, seed=6)
        texts = [
            "The reactor cooling pumps failed at dawn",
            "Quarterly revenue grew in the northern region",
            "Pump maintenance schedule for the cooling loop",
            "Cooling pumps: secret incident report",
        ]
        acls = [ACL, ACL, ACL, Acl("globex", frozenset({"alice"}))]
        loop.run(
            store.upsert(
                [
                    VectorItem(
                        f"l{i}", vectors[i].tolist(), t, {"kind": "doc" if i != 2 else "ops"}, a
                    )
                    for i, (t, a) in enumerate(zip(texts, acls, strict=True))
                ]
            )
        )
        hits = loop.run(store.lexical_query("cooling pumps", 10, scope=SCOPE))
        assert [h.id for h in hits][:2] and {h.id for h in hits} == {"l0", "l2"}  # stemmed
        assert hits[0].score >= hits[-1].score > 0
        only_ops = loop.run(store.lexical_query("pump", 10, filter=Eq("kind", "ops"), scope=SCOPE))
        assert [h.id for h in only_ops] == ["l2"]
        assert loop.run(store.lexical_query("revenue -northern", 10, scope=SCOPE)) == []
        with pytest.raises(ScopeRequired):
            loop.run(store.lexical_query("pump", 10))
    finally:
        loop.run(store.drop())
        loop.run(store.close())


_CHILD = """
import asyncio, json, sys
from evermind.vectorstore import AccessScope, Acl, VectorItem, open_store

async def main(url):
    store = await open_store(url, dim={dim}, name="shared")
    seen = await store.count(scope=AccessScope("acme", frozenset({{"alice"}}), 0))
    await store.upsert([VectorItem("from-child", [1.0] * {dim}, "hello", {{}},
                                   Acl("acme", frozenset({{"alice"}})))])
    await store.close()
    print(json.dumps({{"seen": seen}}))

asyncio.run(main(sys.argv[1]))
"""


def test_two_connections_see_each_other_s_writes(postgres: str, loop: Loop) -> None:
    a: Any = loop.run(open_store(postgres, dim=DIM, name="shared"))
    b: Any = loop.run(open_store(postgres, dim=DIM, name="shared"))
    try:
        loop.run(a.upsert(_items(4)))
        assert loop.run(b.count(scope=SCOPE)) == 4, "a second connection sees the first's writes"
        src = str(Path(evermind.__file__).resolve().parents[1])
        out = procs.run(
            [sys.executable, "-c", _CHILD.format(dim=DIM), postgres],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        )
        assert json.loads(out.stdout.strip().splitlines()[-1]) == {"seen": 4}
        hits = loop.run(a.query([1.0] * DIM, 1, scope=SCOPE))
        assert [h.id for h in hits] == ["from-child"], "a process's write is seen by another"
        assert loop.run(b.count(scope=SCOPE)) == 5

        async def many() -> list[int]:  # one store, concurrent callers: serialised, all served
            calls = [a.query([1.0] * DIM, 3, scope=SCOPE) for _ in range(4)]
            *queries, counted = await asyncio.gather(*calls, a.count(scope=SCOPE))
            return [len(h) for h in queries] + [counted]

        assert loop.run(many()) == [3, 3, 3, 3, 5]
    finally:
        loop.run(a.drop())
        loop.run(a.close())
        loop.run(b.close())


def test_pgvector_refuses_a_table_of_another_dimension(postgres: str, loop: Loop) -> None:
    store: Any = loop.run(open_store(postgres, dim=DIM, name="dims"))
    try:
        with pytest.raises(ConfigError, match=r"holds vector\(12\), not vector\(5\)"):
            loop.run(open_store(postgres, dim=5, name="dims"))
    finally:
        loop.run(store.drop())
        loop.run(store.close())


def test_pgvector_hnsw_with_a_selective_filter_still_returns_k(postgres: str, loop: Loop) -> None:
    """On an analysed table Postgres orders by the HNSW index and filters after it: a filter
    admitting 2% of the rows leaves the index's ~40 candidates nearly empty, so the store
    re-runs the query as an exact scan and still returns the true top k."""
    import psycopg

    store: Any = loop.run(open_store(postgres, dim=DIM, name="hnsw"))
    try:
        vectors = _vectors(2000, seed=7)
        items = [
            VectorItem(f"h{i:04d}", vectors[i].tolist(), "", {"bucket": i % 50}, ACL)
            for i in range(2000)
        ]
        for start in range(0, 2000, 500):
            loop.run(store.upsert(items[start : start + 500]))
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute("ANALYZE hnsw")
            plan = conn.execute(
                "EXPLAIN SELECT id FROM hnsw WHERE tenant = 'acme' "
                "ORDER BY embedding <=> %s::vector LIMIT 10",
                ["[" + ",".join(map(str, vectors[0].tolist())) + "]"],
            ).fetchall()
        assert "hnsw" in " ".join(r[0] for r in plan), "the planner should use the HNSW index"
        query = _vectors(1, seed=8)[0]
        chosen = [it for it in items if it.metadata["bucket"] == 7]
        got = loop.run(store.query(query.tolist(), 10, filter=Eq("bucket", 7), scope=SCOPE))
        assert [h.id for h in got] == _exact(chosen, query, 10)
        unfiltered = loop.run(store.query(query.tolist(), 10, scope=SCOPE))

        # HNSW is approximate: its top 10 against the exact top 10, through the harness.
        async def served(case: Case) -> Outcome:
            return Outcome({"retrieved": [h.id for h in unfiltered]})

        exact = Case("unfiltered", "seed-8 query", {"relevant": _exact(items, query, 10)})
        report = loop.run(
            run_eval("HNSW on 2000 items", [exact], served, [RecallAtK(10, minimum=0.8)])
        )
        (grade,) = report.results[0].grades
        print(f"HNSW recall@10 on 2000 items: {grade.score} ({grade.detail})")
        gates = check_gates(report, [GraderMinimum("recall@10", 1.0)])
        assert gates.passed, f"{gates.render()}\n{report.render()}"
    finally:
        loop.run(store.drop())
        loop.run(store.close())


def test_qdrant_local_store_survives_a_reopen(loop: Loop, tmp_path: Path) -> None:
    url = f"qdrant+local:///{tmp_path}/q"
    first = loop.run(open_store(url, dim=DIM, name="kept"))
    loop.run(first.upsert(_items(5)))
    loop.run(first.close())
    assert (tmp_path / "q").is_dir()
    again = loop.run(open_store(url, dim=DIM, name="kept"))
    try:
        assert loop.run(again.count(scope=SCOPE)) == 5
    finally:
        loop.run(again.close())
    with pytest.raises(ConfigError, match="size 12, not 8"):
        loop.run(open_store(url, dim=8, name="kept"))
