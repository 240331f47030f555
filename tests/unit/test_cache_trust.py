"""Rule 8 of the cache decision: a confident score counts only from an embedder trained for
similarity.

The read-through replay of the development set (``evals/cache_full.py --replay --probes
--model`` on the untrained nano package, the gateway benchmark's ``nano`` row) served the
pair below: the untrained model scored it 0.35 of the way from the threshold to 1.0, which
rule 4b read as a confident embedder.
"""

from __future__ import annotations

import evermind
from evermind.cache import SemanticCache
from evermind.cache.decide import Candidate, decide
from evermind.package.head import EmbedderHead
from evermind.runtime.gateway.core import make_embedder
from evermind.search.calibration import UNCALIBRATED
from evermind.train.distill import fit_centre, package_bytes
from tests.factories import tiny_package

NPM = "npm install fails with ERESOLVE and can't resolve the dependency tree"
NPM_NEAR = "npm install that doesn't save the dependency into package.json"
PASTA = "Can I freeze fresh pasta dough?"
PASTA_PARA = "Is it fine to put homemade pasta dough in the freezer?"
TAU = 0.5


def judged(query: str, cached: str, confidence: float, trust: bool) -> tuple[bool, str | None]:
    found = decide(
        query,
        [Candidate("a", TAU + confidence * (1.0 - TAU), cached, "answer")],
        threshold=TAU,
        calibration=UNCALIBRATED,
        guard=None,
        trust_scores=trust,
    )
    return found.hit, found.refused_by


def test_a_confident_score_relaxes_rule_4b_only_when_scores_are_trusted() -> None:
    assert judged(NPM_NEAR, NPM, 0.35, trust=True) == (True, None)
    assert judged(NPM_NEAR, NPM, 0.35, trust=False) == (False, "residue")
    # However high the score: an untrusted embedder's score is never confidence.
    assert judged(NPM_NEAR, NPM, 0.99, trust=False) == (False, "residue")


def test_untrusted_scores_still_serve_what_the_words_support() -> None:
    # A paraphrase the words carry (pasta, dough, freeze/freezer) needs no confidence.
    assert judged(PASTA_PARA, PASTA, 0.0, trust=False) == (True, None)
    same = "How do I undo the last git commit?"
    assert judged(same + " ", same, 0.0, trust=False) == (True, None)  # exact text


class Embedder:
    def __init__(self, trained: bool | None) -> None:
        if trained is not None:
            self.similarity_trained = trained

    def __call__(self, text: str) -> list[float]:
        return [1.0, 0.0]


def test_the_cache_reads_trust_from_its_embedder_or_its_bound_object() -> None:
    assert SemanticCache(Embedder(None)).trust_scores is True  # says nothing: trusted
    assert SemanticCache(Embedder(False)).trust_scores is False
    assert SemanticCache(Embedder(False), trust_scores=True).trust_scores is True
    cache = SemanticCache(Embedder(True))
    cache.set_embedder(Embedder(False))
    assert cache.trust_scores is False
    model = evermind.load(tiny_package(steps=0))
    assert model.similarity_trained is False  # an untrained package, no embedding head
    assert SemanticCache(model.embed).trust_scores is False
    texts = ["a first text", "another one", "and a third"]
    centred = evermind.load(package_bytes(model, fit_centre(model, texts), "0.1.1", "test"))
    assert centred.similarity_trained is False  # centring alone fits no target
    d = model.config.d_model
    eye = [[float(i == j) for j in range(d)] for i in range(d)]
    fitted = EmbedderHead.from_lists([0.0] * d, eye, "distill", "a-teacher")
    headed = evermind.load(package_bytes(model, fitted, "0.1.2", "test"))
    assert headed.similarity_trained is True  # a head fitted to a teacher
    assert SemanticCache(headed.embed).trust_scores is True


def test_the_gateway_embedder_carries_the_package_verdict(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "untrained.evermind"
    path.write_bytes(tiny_package(steps=0))
    with ThreadPoolExecutor(1) as pool:
        made = make_embedder(f"package:{path}", pool)
        assert made is not None
        assert SemanticCache(made[0]).trust_scores is False
        terms = make_embedder("terms", pool)
        assert terms is not None and SemanticCache(terms[0]).trust_scores is True


class TabSession:
    """What the tab's cache reads of a Studio session (no model: the CPU scan)."""

    embedder_fingerprint = "tab-model"
    model = None

    def __init__(self, head: EmbedderHead | None) -> None:
        self.head = head


def test_the_tab_cache_trusts_only_a_teacher_fitted_head() -> None:
    from evermind.studio.tab_memory import TabCache

    fitted = EmbedderHead.from_lists([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], "distill", "t")
    centred = EmbedderHead.from_lists([0.5, 0.5])
    assert TabCache(None, TabSession(fitted), semantic=True).trust_scores is True
    assert TabCache(None, TabSession(centred), semantic=True).trust_scores is False
    assert TabCache(None, TabSession(None), semantic=True).trust_scores is False
    assert TabCache(None, TabSession(None), semantic=False).trust_scores is True  # trigrams
