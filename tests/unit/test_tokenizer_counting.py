"""The tokenizer's first pass in pieces (``counting_pieces``) counts exactly what the whole text
counts, so the Studio can report progress and take a cancel between pieces without changing
the tokenizer it trains."""

from __future__ import annotations

import pytest

from evermind.errors import TokenizerError
from evermind.tokenizer import Tokenizer
from evermind.tokenizer.pretokenizer import PreTokenizer
from evermind.tokenizer.trainer import count_words, counting_pieces
from tests.factories import TEXT

#: Line ends of every kind the pre-tokenizer treats specially: blank lines, trailing and
#: leading spaces, tabs, contractions, digits, accents, non-ASCII spaces and a special token.
TRICKY = (
    "alpha\nBeta\n\ngamma  \n1x\n's\n\tq\n\u00e9t\u00e9\nZ<|endoftext|>\nA\n  B\n.\nC\u00a0\nD\n"
    "x\u3000\ny)\n(z\n\n\n42\nit'll\n"
)


PROSE = (TEXT.strip() + "\n") * 12


@pytest.mark.parametrize("text", [PROSE, TRICKY * 300], ids=["prose", "tricky"])
@pytest.mark.parametrize("chars", [1, 5, 64, 4096])
def test_the_pieces_count_the_words_the_whole_text_counts(text: str, chars: int) -> None:
    pieces = list(counting_pieces(text, chars))
    assert "".join(pieces) == text
    assert len(pieces) > 1
    split = PreTokenizer.default().split
    assert count_words(pieces, split) == count_words([text], split)


def test_a_tokenizer_trained_on_pieces_is_the_one_trained_on_the_whole_text() -> None:
    text = TRICKY * 40 + TEXT * 6
    whole = Tokenizer.train(text, 400)
    pieced = Tokenizer.train(counting_pieces(text, 97), 400)
    assert pieced.spec.merges == whole.spec.merges
    assert pieced.to_json() == whole.to_json()


def test_a_text_without_a_safe_cut_is_one_piece_and_a_bad_size_is_refused() -> None:
    assert list(counting_pieces("one long line " * 50, 8)) == ["one long line " * 50]
    assert list(counting_pieces("", 8)) == []
    with pytest.raises(TokenizerError, match="chars is 0"):
        list(counting_pieces("text", 0))
