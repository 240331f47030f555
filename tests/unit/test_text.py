"""The shared text module: index terms and the stemmer (used by BM25 and the cache guards)."""

from __future__ import annotations

from evermind.text import stem, terms


def test_terms_keep_codes_whole_and_split() -> None:
    tokens = terms("Error TSR-417 on db-prod-01.tessera.internal, SKU TSR-ENT-A.")
    for whole in ("tsr-417", "db-prod-01.tessera.internal", "tsr-ent-a"):
        assert whole in tokens
    for part in ("tsr", "417", "db", "prod", "01", "tessera", "internal", "ent"):
        assert part in tokens
    assert "on" not in tokens  # stop word
    assert terms("Niamh’s reports") == ["niamh", "report"]
    assert terms("ÉCOLE") == terms("école")


def test_stemming_is_light_and_leaves_codes() -> None:
    assert stem("reports") == "report" and stem("policies") == "policy"
    assert stem("status") == "status" and stem("class") == "class"
    assert stem("v2s") == "v2s" and stem("417") == "417"
