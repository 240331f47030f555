"""Parity with Hugging Face ``tokenizers``: same ``tokenizer.json``, same ids, both ways."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.tokenizer import ENDOFTEXT, SpecialTokens, Tokenizer

hf = pytest.importorskip("tokenizers", reason="HF tokenizers is the reference (test extra)")

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. We're sure it'll be fine, isn't it?\n",
    "for i in range(10):\n\tprint(f'{i:>4}')  # counts 0..9\n    x = [1, 22, 333]\n",
    "In 2024 the price rose 1234567 percent; call +1-555-0100 or 3.14159e-10.\n",
    "Café crème, naïve résumé, Ångström, Straße, ΑΒΓ αβγ, Привет мир.\n",
    "日本語のテキストと中文文本，还有한국어 텍스트。\n",
    "العربية نص مع أرقام ١٢٣ و עברית גם.\n",
    "Emoji 😀😃 ❤️ 👨‍👩‍👧‍👦 👍🏽 🏳️‍🌈 and flags 🇫🇷🇯🇵.\n",
    "Combining: e\u0301 a\u0308 n\u0303 क्षि ñ ำ and marks after digits 1\u0301.\n",
] * 6

PARITY_SAMPLES = [
    "",
    "Hello, world! This is ASCII prose with 'quotes' and don't/can't/we'll/I'd.",
    "def f(x):\n    return {'a': [1, 2, 3]}\n\n\nclass A:\n\tpass\n",
    "1234567 12 1 0.5 -42 1e10 ٣٤٥ Ⅻ ½",
    "👨‍👩‍👧 🧑🏽‍💻 ❤️‍🔥 😀 🇺🇳",
    "漢字かなカナ 中文 한국어",
    "مرحبا بالعالم",
    "e\u0301\u0302 \u0301x नमस्ते",
    "tabs\t\tand\n\n  newlines   multiple    spaces  ",
    "   leading and trailing   ",
    "\u00a0nbsp\u2028line\u2029para\u3000ideographic\u0085nel\x1c\x1f",
    f"special {ENDOFTEXT} inside<|pad|>and{ENDOFTEXT}{ENDOFTEXT}",
    "\x00\x01\x7f control \ufeff bom \U0010ffff \ue000 unassigned \u0378",
]


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return Tokenizer.train(TRAIN_TEXT, 600, special_tokens=SpecialTokens(pad="<|pad|>"))


@pytest.fixture(scope="module")
def theirs(ours: Tokenizer) -> object:
    return hf.Tokenizer.from_str(ours.to_json())


def _hf_ids(tokenizer: object, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", PARITY_SAMPLES)
def test_hf_loads_our_json_and_gives_identical_ids(
    ours: Tokenizer, theirs: object, text: str
) -> None:
    ids = ours.encode(text)
    assert ids == _hf_ids(theirs, text)
    assert theirs.decode(ids, skip_special_tokens=False) == ours.decode(ids)  # type: ignore[attr-defined]
    assert ours.decode(ids) == text


def test_identical_ids_on_the_whole_training_text(ours: Tokenizer, theirs: object) -> None:
    text = "".join(TRAIN_TEXT)
    assert ours.encode(text) == _hf_ids(theirs, text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_identical_ids_on_random_text(ours: Tokenizer, theirs: object, text: str) -> None:
    assert ours.encode(text) == _hf_ids(theirs, text)


BOUNDARY_ALPHABET = [
    *"aZst'lrdvem 123\n\t\r.,!?-_",
    *["\u0301", "é", "😀", "\u200d", "\ufe0f", "\u00a0", "\x1c", "中", "٣", "½", "\u3000"],
]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(BOUNDARY_ALPHABET), max_size=80))
def test_identical_ids_on_boundary_heavy_text(ours: Tokenizer, theirs: object, text: str) -> None:
    """Contractions, digit runs, mark/ZWJ/space boundaries: where splitting rules differ."""
    assert ours.encode(text) == _hf_ids(theirs, text)


def test_encode_special_tokens_as_text_matches_hf(ours: Tokenizer) -> None:
    plain = hf.Tokenizer.from_str(ours.to_json())
    plain.encode_special_tokens = True
    text = f"a{ENDOFTEXT}b<|pad|>"
    assert ours.encode(text, allowed_special="none") == _hf_ids(plain, text)


def _hf_trained(
    pre_tokenizer: object,
    *,
    vocab_size: int = 500,
    full_alphabet: bool = True,
    **model_options: object,
) -> object:
    tokenizer = hf.Tokenizer(hf.models.BPE(**model_options))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = hf.decoders.ByteLevel()
    specials = [ENDOFTEXT]
    if model_options.get("unk_token"):
        specials.append(str(model_options["unk_token"]))
    trainer = hf.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet() if full_alphabet else [],
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAIN_TEXT, trainer)
    return tokenizer


GPT4_STYLE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
)

HF_SETUPS = {
    "bytelevel": lambda: _hf_trained(hf.pre_tokenizers.ByteLevel(add_prefix_space=False)),
    "bytelevel_prefix_space": lambda: _hf_trained(
        hf.pre_tokenizers.ByteLevel(add_prefix_space=True)
    ),
    "split_gpt4_style": lambda: _hf_trained(
        hf.pre_tokenizers.Sequence(
            [
                hf.pre_tokenizers.Split(hf.Regex(GPT4_STYLE), behavior="isolated"),
                hf.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    ),
    "missing_bytes_dropped": lambda: _hf_trained(
        hf.pre_tokenizers.ByteLevel(add_prefix_space=False), full_alphabet=False
    ),
    "missing_bytes_unk_fused": lambda: _hf_trained(
        hf.pre_tokenizers.ByteLevel(add_prefix_space=False),
        full_alphabet=False,
        unk_token="<unk>",
        fuse_unk=True,
    ),
    "ignore_merges": lambda: _hf_trained(
        hf.pre_tokenizers.ByteLevel(add_prefix_space=False), ignore_merges=True
    ),
}


@pytest.mark.parametrize("setup", sorted(HF_SETUPS))
def test_we_load_json_that_hf_writes(setup: str) -> None:
    theirs = HF_SETUPS[setup]()
    ours = Tokenizer.from_json(theirs.to_str())  # type: ignore[attr-defined]
    assert ours.vocab_size == theirs.get_vocab_size()  # type: ignore[attr-defined]
    for text in [*PARITY_SAMPLES, "".join(TRAIN_TEXT)]:
        assert ours.encode(text) == _hf_ids(theirs, text), text[:60]


def test_we_load_legacy_string_merges() -> None:
    theirs = HF_SETUPS["bytelevel"]()
    document = json.loads(theirs.to_str())  # type: ignore[attr-defined]
    document["model"]["merges"] = [" ".join(pair) for pair in document["model"]["merges"]]
    legacy = json.dumps(document)
    ours = Tokenizer.from_json(legacy)
    reloaded = hf.Tokenizer.from_str(legacy)
    for text in PARITY_SAMPLES:
        assert ours.encode(text) == _hf_ids(reloaded, text)
