"""Unit tests of the byte-level BPE tokenizer: training, encode/decode, specials, JSON io."""

from __future__ import annotations

import ast
import itertools
import json
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.errors import TokenizerError
from evermind.tokenizer import (
    ENDOFTEXT,
    PreTokenizer,
    SpecialTokens,
    Tokenizer,
    encode_all,
)
from evermind.tokenizer import model as model_module
from evermind.tokenizer.bytes_map import BYTE_TO_SYMBOL, bytes_to_symbols, symbols_to_bytes
from evermind.tokenizer.trainer import count_words, learn_merges

SRC = Path(__file__).resolve().parents[2] / "src" / "evermind"

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog didn't care; it's lazy.\n",
    "def add(a, b):\n    return a + b  # 1234567 and 3.14159\n\n",
    "Numbers: 1, 22, 333, 4444, 55555, 2024-06-30, 0x1F600.\n",
    "Émile a mangé une crème brûlée à Noël. Ça va très bien.\n",
    "東京は日本の首都です。中文字符也可以。\n",
    "مرحبا بالعالم، هذا نص عربي.\n",
    "Emoji: 😀 ❤️ 👨‍👩‍👧 👍🏽 and tabs\tand  double  spaces.\n",
] * 8


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(CORPUS, 420, special_tokens=SpecialTokens(pad="<|pad|>"))


# ----------------------------------------------------------------------------- training


def test_train_lays_out_specials_then_bytes_then_merges(tokenizer: Tokenizer) -> None:
    assert tokenizer.vocab_size == 420
    assert tokenizer.special_tokens == {ENDOFTEXT: 0, "<|pad|>": 1}
    assert (tokenizer.eos_id, tokenizer.bos_id, tokenizer.pad_id) == (0, 0, 1)
    for byte in (0, 32, 65, 255):
        assert tokenizer.token_to_id(BYTE_TO_SYMBOL[byte]) == 2 + byte
    assert len(tokenizer.spec.merges) == 420 - 258
    # Every learned token is the concatenation of its merge's two parts.
    for left, right in tokenizer.spec.merges:
        assert tokenizer.token_to_id(left + right) is not None


def test_training_is_deterministic_and_order_independent_for_ties() -> None:
    first = Tokenizer.train(CORPUS, 350).to_json()
    second = Tokenizer.train(iter(list(CORPUS)), 350).to_json()
    assert first == second
    # Equal counts: the pair with the lexicographically smaller bytes wins.
    for documents in (["ab", "cd", "ab", "cd"], ["cd", "ab", "cd", "ab"]):
        merges = Tokenizer.train(documents, 258).spec.merges
        assert merges == [("a", "b")]


def _naive_merges(
    word_counts: dict[str, int], num_new: int, min_frequency: int
) -> list[tuple[bytes, bytes]]:
    """Slow, obvious reference: recount every pair before each merge."""
    words = {tuple(bytes([b]) for b in w.encode()): c for w, c in word_counts.items()}
    vocab = {bytes([b]) for b in range(256)}
    merges: list[tuple[bytes, bytes]] = []
    added = 0
    while added < num_new:
        counts: Counter[tuple[bytes, bytes]] = Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                counts[pair] += count
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[best] < min_frequency:
            break
        merges.append(best)
        if best[0] + best[1] not in vocab:
            vocab.add(best[0] + best[1])
            added += 1
        rewritten: dict[tuple[bytes, ...], int] = {}
        for word, count in words.items():
            out: list[bytes] = []
            index = 0
            while index < len(word):
                if index + 1 < len(word) and (word[index], word[index + 1]) == best:
                    out.append(word[index] + word[index + 1])
                    index += 2
                else:
                    out.append(word[index])
                    index += 1
            rewritten[tuple(out)] = rewritten.get(tuple(out), 0) + count
        words = rewritten
    return merges


@pytest.mark.parametrize("seed", range(6))
def test_incremental_pair_counts_match_full_recount(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = ["a", "b", "c", "aa", "ab", "é", "😀", " "]
    word_counts = {
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))): rng.randint(1, 6)
        for _ in range(60)
    }
    got = learn_merges(word_counts, 40, min_frequency=2)
    want = _naive_merges(word_counts, 40, 2)
    assert got == want


def test_progress_reports_merges_done_out_of_total() -> None:
    calls: list[tuple[int, int]] = []
    tok = Tokenizer.train(CORPUS, 400, on_progress=lambda done, total: calls.append((done, total)))
    total = 400 - 257
    assert len(calls) >= 10
    assert calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert tok.vocab_size == 400


def test_small_corpus_stops_early_and_final_progress_is_complete() -> None:
    calls: list[tuple[int, int]] = []
    tok = Tokenizer.train("abab abab", 1000, on_progress=lambda d, t: calls.append((d, t)))
    assert tok.vocab_size < 1000
    done = tok.vocab_size - 257
    assert calls[-1] == (done, done)


def test_special_tokens_in_training_text_are_not_learned() -> None:
    with_specials = Tokenizer.train([f"hello world{ENDOFTEXT}hello there"] * 5, 300)
    split = Tokenizer.train(["hello world", "hello there"] * 5, 300)
    assert with_specials.spec.merges == split.spec.merges


def test_learned_token_never_collides_with_a_special() -> None:
    # " abc" is spelled "Ġabc" in byte-level form: the same string as this special token.
    tok = Tokenizer.train(["abc abc abc abc"] * 3, 300, special_tokens=SpecialTokens(pad="Ġabc"))
    assert tok.special_tokens["Ġabc"] == 1
    # Without the guard the third merge would be ("Ġ", "abc") -> "Ġabc"; it is skipped.
    assert tok.spec.merges == [("a", "b"), ("ab", "c")]
    assert tok.encode(" abc", allowed_special="none") == [2 + 32, tok.token_to_id("abc")]
    assert tok.decode(tok.encode(" abc Ġabc")) == " abc Ġabc"


@pytest.mark.parametrize("bad", [10, 256, 3.5, True])
def test_vocab_size_must_cover_bytes_and_specials(bad: object) -> None:
    with pytest.raises(TokenizerError, match="vocab_size"):
        Tokenizer.train(CORPUS, bad)  # type: ignore[arg-type]


def test_smallest_vocab_is_bytes_plus_specials() -> None:
    tok = Tokenizer.train(CORPUS, 257)
    assert tok.vocab_size == 257 and tok.spec.merges == []
    assert tok.decode(tok.encode("héllo")) == "héllo"


def test_training_rejects_non_text_items() -> None:
    with pytest.raises(TokenizerError, match="expected str"):
        Tokenizer.train(["ok", b"bytes"], 300)  # type: ignore[list-item]
    with pytest.raises(TokenizerError, match="min_frequency"):
        learn_merges({"ab": 3}, 5, min_frequency=0)


def test_count_words_counts_pre_tokens() -> None:
    counts = count_words(["the cat the cat", "the"], PreTokenizer.default().split)
    assert counts == Counter({"the": 2, " cat": 2, " the": 1})


# ----------------------------------------------------------------------------- specials


def test_roles_can_be_distinct_or_shared() -> None:
    roles = SpecialTokens(eos="<|eos|>", bos="<|bos|>", pad="<|pad|>", extra=("<|user|>",))
    tok = Tokenizer.train(CORPUS, 300, special_tokens=roles)
    assert tok.special_tokens == {
        ENDOFTEXT: 0,
        "<|eos|>": 1,
        "<|bos|>": 2,
        "<|pad|>": 3,
        "<|user|>": 4,
    }
    assert (tok.eos_id, tok.bos_id, tok.pad_id) == (1, 2, 3)
    with pytest.raises(TokenizerError, match="non-empty"):
        SpecialTokens(pad="").contents()


def test_special_tokens_matched_whole_when_allowed(tokenizer: Tokenizer) -> None:
    text = f"a{ENDOFTEXT}b<|pad|>c"
    ids = tokenizer.encode(text)
    assert ids.count(0) == 1 and ids.count(1) == 1
    assert tokenizer.decode(ids) == text
    plain = tokenizer.encode(text, allowed_special="none")
    assert 0 not in plain and 1 not in plain
    assert tokenizer.decode(plain) == text
    only_pad = tokenizer.encode(text, allowed_special={"<|pad|>"})
    assert 0 not in only_pad and only_pad.count(1) == 1
    assert tokenizer.decode(ids, skip_special=True) == "abc"


def test_longest_special_wins_at_the_same_position() -> None:
    tok = Tokenizer.train(CORPUS, 300, special_tokens=SpecialTokens(extra=("<|a|>", "<|a|>x")))
    assert tok.encode("<|a|>x") == [tok.special_tokens["<|a|>x"]]


def test_allowed_special_validation(tokenizer: Tokenizer) -> None:
    with pytest.raises(TokenizerError, match="not special tokens"):
        tokenizer.encode("x", allowed_special={"<nope>"})
    with pytest.raises(TokenizerError, match="collection"):
        tokenizer.encode("x", allowed_special="<|pad|>")


# ----------------------------------------------------------------------------- encode/decode


def test_encode_examples_round_trip(tokenizer: Tokenizer) -> None:
    for text in ["", " ", "\n\n\t", "hello world", "1234567", "👨‍👩‍👧", "e\u0301", "\x00\xff"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.encode("") == []


def test_frequent_word_becomes_few_tokens(tokenizer: Tokenizer) -> None:
    assert len(tokenizer.encode(" the")) == 1
    assert len(tokenizer.encode("The quick brown fox")) < len("The quick brown fox")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_any_text(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=20), st.sampled_from([ENDOFTEXT, "<|pad|>"]))))
def test_round_trip_with_specials(tokenizer: Tokenizer, parts: list[str]) -> None:
    text = "".join(parts)
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.decode(tokenizer.encode(text, allowed_special="none")) == text


def test_cache_is_bounded_and_results_unchanged(
    tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = " ".join(f"w{index}x" for index in range(50))
    expected = tokenizer.encode(words)
    fresh = Tokenizer.from_json(tokenizer.to_json())
    monkeypatch.setattr(model_module, "_CACHE_LIMIT", 5)
    assert fresh.encode(words) == expected
    assert len(fresh._cache) <= 5


def test_decode_rejects_unknown_ids(tokenizer: Tokenizer) -> None:
    for bad in (-1, tokenizer.vocab_size, 10**9):
        with pytest.raises(TokenizerError, match="not in the vocabulary"):
            tokenizer.decode([5, bad])


def test_encode_rejects_non_text(tokenizer: Tokenizer) -> None:
    with pytest.raises(TokenizerError, match="expected str"):
        tokenizer.encode(b"bytes")  # type: ignore[arg-type]


def test_encode_all_appends_eos(tokenizer: Tokenizer) -> None:
    ids = encode_all(tokenizer, ["ab", "cd"])
    assert ids == [*tokenizer.encode("ab"), 0, *tokenizer.encode("cd"), 0]


# ----------------------------------------------------------------------------- streaming


def test_stream_decoder_holds_back_partial_characters(tokenizer: Tokenizer) -> None:
    offset = 2  # two specials before the byte tokens
    emoji_bytes = "😀".encode()
    stream = tokenizer.stream_decoder()
    assert stream.feed([offset + b for b in emoji_bytes[:3]]) == ""
    assert stream.pending
    assert stream.feed(offset + emoji_bytes[3]) == "😀"
    assert not stream.pending
    assert stream.feed([offset + 0xFF, offset + ord("a")]) == "\ufffda"
    assert stream.feed([offset + 0xE6]) == ""
    assert stream.flush() == "\ufffd"
    assert stream.flush() == ""


@settings(max_examples=150, deadline=None)
@given(text=st.text(), cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_stream_chunks_concatenate_to_the_text(
    tokenizer: Tokenizer, text: str, cuts: list[int]
) -> None:
    ids = tokenizer.encode(text)
    bounds = sorted({0, len(ids), *(cut for cut in cuts if cut < len(ids))})
    stream = tokenizer.stream_decoder()
    chunks = [stream.feed(ids[a:b]) for a, b in itertools.pairwise(bounds)]
    chunks.append(stream.flush())
    assert "".join(chunks) == text
    assert all("\ufffd" not in chunk for chunk in chunks) or "\ufffd" in text


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=419)))
def test_stream_equals_decode_for_any_ids(tokenizer: Tokenizer, ids: list[int]) -> None:
    stream = tokenizer.stream_decoder()
    streamed = "".join(stream.feed([token_id]) for token_id in ids) + stream.flush()
    assert streamed == tokenizer.decode(ids)


# ----------------------------------------------------------------------------- json io


def test_json_round_trip_is_exact(tokenizer: Tokenizer, tmp_path: Path) -> None:
    text = tokenizer.to_json()
    again = Tokenizer.from_json(text, pad="<|pad|>")
    assert again.to_json() == text
    assert again.encode("The lazy dog 😀") == tokenizer.encode("The lazy dog 😀")
    assert again.pad_id == 1
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    assert Tokenizer.load(path, pad="<|pad|>").to_json() == text
    document = json.loads(text)
    assert document["normalizer"] is None
    assert document["model"]["type"] == "BPE"
    assert document["added_tokens"][0]["content"] == ENDOFTEXT
    assert document["added_tokens"][0]["special"] is True


def test_summary_describes_the_tokenizer(tokenizer: Tokenizer) -> None:
    summary = tokenizer.summary()
    assert summary["vocab_size"] == 420
    assert summary["special_tokens"] == {ENDOFTEXT: 0, "<|pad|>": 1}
    assert (summary["eos"], summary["bos"], summary["pad"]) == (ENDOFTEXT, ENDOFTEXT, "<|pad|>")
    assert len(summary["sha256"]) == 64
    roles = {role: summary[role] for role in ("eos", "bos", "pad")}
    assert Tokenizer.from_json(tokenizer.to_json(), **roles).summary() == summary
    other = Tokenizer.train(CORPUS, 300)
    assert other.summary()["sha256"] != summary["sha256"]


def _mutated(tokenizer: Tokenizer, change: str) -> str:
    document = json.loads(tokenizer.to_json())
    if change == "wordpiece":
        document["model"]["type"] = "WordPiece"
    elif change == "normalizer":
        document["normalizer"] = {"type": "NFC"}
    elif change == "merge":
        document["model"]["merges"].append(["zzzq", "qq"])
    elif change == "lstrip":
        document["added_tokens"][0]["lstrip"] = True
    elif change == "decoder":
        document["decoder"] = None
    elif change == "pretokenizer":
        document["pre_tokenizer"] = {"type": "Whitespace"}
    elif change == "pattern":
        document["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\d+|\w+"
    elif change == "dropout":
        document["model"]["dropout"] = 0.1
    elif change == "duplicate_id":
        document["model"]["vocab"]["Ġzzz"] = 5
    return json.dumps(document)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("wordpiece", "model type 'WordPiece' is not supported"),
        ("normalizer", "normalizer"),
        ("merge", "missing from the vocab"),
        ("lstrip", "lstrip=true"),
        ("decoder", "ByteLevel decoder"),
        ("pretokenizer", "pre_tokenizer"),
        ("pattern", r"the escape \\d"),
        ("dropout", "dropout"),
        ("duplicate_id", "unique ids"),
    ],
)
def test_from_json_refuses_unsupported_configurations(
    tokenizer: Tokenizer, change: str, message: str
) -> None:
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.from_json(_mutated(tokenizer, change))


def test_from_json_reports_bad_json_and_bad_roles(tokenizer: Tokenizer, tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="not valid JSON"):
        Tokenizer.from_json('{"model": ')
    with pytest.raises(TokenizerError, match="expected a JSON object"):
        Tokenizer.from_json("[1, 2]")
    with pytest.raises(TokenizerError, match="not an added token"):
        Tokenizer.from_json(tokenizer.to_json(), eos="<|missing|>")
    with pytest.raises(TokenizerError, match="cannot read"):
        Tokenizer.load(tmp_path / "absent.json")


# ----------------------------------------------------------------------------- pieces


def test_byte_symbols_round_trip() -> None:
    data = bytes(range(256))
    assert symbols_to_bytes(bytes_to_symbols(data)) == data
    assert bytes_to_symbols(b" \n") == "ĠĊ"
    with pytest.raises(TokenizerError, match="not one of the 256"):
        symbols_to_bytes("€")


def test_browser_safe_imports_only() -> None:
    """Tokenizer and corpus modules import only the standard library and evermind."""
    files = [*sorted((SRC / "tokenizer").glob("*.py")), SRC / "train" / "corpus.py"]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in {"evermind", "__future__"}, (
                    f"{path.name} imports {name}"
                )
