"""The chunker: sizes in words or tokens, whole words and code fences, boundaries, overlap."""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.errors import ConfigError
from evermind.ingest import PARSERS, Chunker, Document, ParseOptions, Section
from evermind.tokenizer import Tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ingest"
FENCE = "```python\n" + "\n".join(f"value_{i} = compute({i}) + 1" for i in range(40)) + "\n```"


def one_section(text: str, crumbs: tuple[str, ...] = ()) -> Document:
    return Document("s.md", "markdown", (Section(text, crumbs, 1),))


def prose(seed: int, sentences: int) -> str:
    rng = random.Random(seed)
    words = ["queue", "worker", "lease", "journal", "retry", "backoff", "token", "server"]
    out = []
    for _ in range(sentences):
        n = rng.randint(4, 14)
        out.append(" ".join(rng.choice(words) for _ in range(n)).capitalize() + ".")
    return " ".join(out)


def all_docs() -> list[Document]:
    docs = []
    for path in [*sorted(FIXTURES.rglob("*.md")), FIXTURES / "faq.html"]:
        name = PARSERS.name_for(path.name)
        assert name is not None
        docs.append(PARSERS.get(name)(path.read_text(), path.name, ParseOptions()))
    return docs


def test_word_chunks_respect_the_size_and_never_split_a_word() -> None:
    chunker = Chunker(size=40, overlap=8)
    for doc in all_docs():
        source_words = {w for s in doc.sections for w in s.text.split()}
        for chunk in chunker.chunk(doc):
            assert chunk.units == len(chunk.content.split())
            assert chunk.units <= 40 or chunk.oversize, (chunk.key, chunk.units)
            assert set(chunk.text.split()) <= source_words, chunk.key  # whole words only


def test_a_code_fence_is_never_split_and_a_long_one_is_flagged() -> None:
    text = f"Intro sentence here.\n\n{FENCE}\n\nAfter the code."
    chunks = Chunker(size=20, overlap=5).chunk(one_section(text))
    fenced = [c for c in chunks if "```" in c.text]
    assert len(fenced) == 1 and fenced[0].text == FENCE and fenced[0].oversize
    assert fenced[0].units > 20
    assert [c.oversize for c in chunks] == [False, True, False]
    assert fenced[0].line == 3
    # A fence that fits is packed with its neighbours, whole.
    small = "Before.\n\n```\na = 1\n```\n\nAfter."
    (only,) = Chunker(size=20, overlap=0).chunk(one_section(small))
    assert only.text == small and not only.oversize


def test_paragraph_boundaries_come_before_sentence_boundaries() -> None:
    paragraphs = [prose(i, 2) for i in range(6)]
    chunker = Chunker(size=60, overlap=0)
    chunks = chunker.chunk(one_section("\n\n".join(paragraphs)))
    assert len(chunks) > 1
    for chunk in chunks:  # every chunk is whole paragraphs
        assert all(p in paragraphs for p in chunk.text.split("\n\n")), chunk.text


def test_a_long_paragraph_is_cut_at_sentence_ends() -> None:
    paragraph = prose(7, 30)
    chunks = Chunker(size=50, overlap=0).chunk(one_section(paragraph))
    assert len(chunks) > 3
    for chunk in chunks:
        assert chunk.text.endswith("."), chunk.text[-30:]
    assert " ".join(c.text for c in chunks) == paragraph  # nothing lost, nothing doubled


def test_consecutive_chunks_overlap_by_at_most_the_overlap() -> None:
    paragraph = prose(3, 40)
    chunks = Chunker(size=50, overlap=10).chunk(one_section(paragraph))
    assert len(chunks) > 3
    for before, after in itertools.pairwise(chunks):
        words_before, words_after = before.text.split(), after.text.split()
        shared = next(
            n for n in range(10, 0, -1) if words_before[-n:] == words_after[:n]
        )  # StopIteration (a failure) when nothing is shared
        assert 1 <= shared <= 10


def test_a_sentence_longer_than_the_size_is_cut_between_words() -> None:
    sentence = " ".join(f"word{i}" for i in range(95))
    chunks = Chunker(size=30, overlap=0).chunk(one_section(sentence))
    assert [len(c.text.split()) for c in chunks] == [30, 30, 30, 5]
    giant = "x" * 500
    (chunk,) = Chunker(size=10, overlap=0, tokenizer=_tokenizer()).chunk(one_section(giant))
    assert chunk.text == giant and chunk.oversize  # one word is never split


def test_breadcrumbs_lead_the_content_and_count_towards_the_size() -> None:
    crumbs = ("Guide", "Install", "Linux")
    chunks = Chunker(size=20, overlap=0).chunk(one_section(prose(1, 8), crumbs))
    for chunk in chunks:
        assert chunk.content.startswith("Guide > Install > Linux\n\n")
        assert chunk.units == len(chunk.content.split()) <= 20


def _tokenizer() -> Tokenizer:
    text = "\n".join(p.read_text() for p in sorted(FIXTURES.rglob("*.*")))
    return Tokenizer.train(text, 600)


def test_token_chunks_are_counted_in_the_tokenizers_tokens() -> None:
    tokenizer = _tokenizer()
    chunker = Chunker(size=64, overlap=12, tokenizer=tokenizer)
    assert chunker.unit == "tokens" and chunker.settings()["tokenizer"]
    total = 0
    for doc in all_docs():
        for chunk in chunker.chunk(doc):
            measured = len(tokenizer.encode(chunk.content))
            # The per-piece sum is the count of the whole chunk (pre-tokenizer boundaries).
            assert chunk.units == measured, (chunk.key, chunk.units, measured)
            assert measured <= 64 or chunk.oversize
            total += 1
    words = sum(len(Chunker(64, 12).chunk(d)) for d in all_docs())
    assert total > words  # tokens are smaller than words: more chunks


def test_chunk_keys_are_deterministic_and_name_source_position_and_hash() -> None:
    doc = all_docs()[0]
    first = Chunker(50, 10).chunk(doc)
    again = Chunker(50, 10).chunk(doc)
    assert [c.key for c in first] == [c.key for c in again]
    for chunk in first:
        assert re.fullmatch(rf"{re.escape(doc.source)}#{chunk.position}@[0-9a-f]{{12}}", chunk.key)
        assert chunk.key.endswith(chunk.content_hash[:12])


@pytest.mark.parametrize("size, overlap", [(4, 0), (20, 20), (20, -1), (True, 0)])
def test_bad_sizes_are_refused(size: int, overlap: int) -> None:
    with pytest.raises(ConfigError):
        Chunker(size, overlap)


@st.composite
def sections(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Paragraphs of sentences and code fences, every word unique (``w<n>``)."""
    counter = itertools.count()
    blocks, fences = [], []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 4)) == 0:
            lines = [
                f"code{next(counter)} = {next(counter)}" for _ in range(draw(st.integers(1, 30)))
            ]
            fence = "```\n" + "\n".join(lines) + "\n```"
            blocks.append(fence)
            fences.append(fence)
            continue
        sentences = []
        for _ in range(draw(st.integers(1, 12))):
            words = [f"w{next(counter)}" for _ in range(draw(st.integers(1, 25)))]
            sentences.append(" ".join(words).capitalize() + draw(st.sampled_from([".", "!", "?"])))
        blocks.append(" ".join(sentences))
    return "\n\n".join(blocks), fences


@settings(max_examples=150, deadline=None)
@given(sections(), st.integers(8, 60), st.integers(0, 7))
def test_chunks_keep_every_word_once_in_order_and_every_fence_whole(
    drawn: tuple[str, list[str]], size: int, overlap: int
) -> None:
    text, fences = drawn
    chunks = Chunker(size, overlap).chunk(one_section(text))
    words: list[str] = []
    for chunk in chunks:
        here = [w for w in chunk.text.split() if w != "```"]  # the one non-unique word
        shared = 0
        if words:
            shared = next(
                (n for n in range(min(overlap, len(here)), 0, -1) if words[-n:] == here[:n]), 0
            )
        words.extend(here[shared:])
        assert chunk.units <= size or chunk.oversize
        assert chunk.text.count("```") % 2 == 0  # a fence is never cut open
    assert words == [w for w in text.split() if w != "```"]  # nothing lost or doubled or cut
    for fence in fences:
        assert sum(fence in c.text for c in chunks) == 1
