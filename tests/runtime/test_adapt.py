"""Adaptation with rollback (evermind.train.adapt, ``evermind adapt``) on a tiny real model.

Adapting on a new domain lowers its held-out loss while the original corpus's loss rises by
at most the stated bound (:data:`DEFAULT_MAX_FORGETTING`, with rehearsal); a worse adaptation
(a diverging learning rate, a demanded gain it cannot reach, forgetting past the bound)
rolls back — no adapter, no package — and through the CLI leaves every file's bytes as they
were. The same holds for a Mamba-2 package (adapters on its ``in_proj`` and ``out_proj``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evermind.cli import main as cli_main
from evermind.errors import ConfigError, InputError, PackageError
from evermind.job import convert_package
from evermind.package import read_package
from evermind.train.adapt import DEFAULT_MAX_FORGETTING, AdaptConfig, adapt, split_text
from evermind.train.lora_file import merge_package, read_adapter
from tests.factories import ADAPT_QUICK, RIVERS, TEXT, tiny_package

#: The new domain (one pattern the tiny model has never read) and a quick recipe.
NEW, QUICK = RIVERS, ADAPT_QUICK


@pytest.fixture(scope="module")
def base() -> bytes:
    return tiny_package(name="adapt-base", steps=30)


def test_adapting_lowers_the_new_domain_loss_within_the_forgetting_bound(base: bytes) -> None:
    result = adapt(base, NEW, QUICK, corpus=TEXT)
    print(json.dumps({k: v for k, v in result.to_dict().items() if k != "train"}, indent=1))
    assert result.accepted, result.reason
    assert result.held_out_after is not None and result.original_after is not None
    assert result.original_before is not None
    assert result.held_out_after < result.held_out_before - QUICK.min_improvement
    assert result.original_after - result.original_before <= DEFAULT_MAX_FORGETTING
    assert result.rehearsal_tokens > 0 and result.train_texts + result.held_out_texts == 16
    # The package returned is the base with the returned adapter merged in (read back: same).
    assert result.package is not None and result.adapter is not None
    merged = read_package(result.package)
    assert merged.version == "0.1.1" and merged.name == "adapt-base"
    again = read_package(merge_package(read_package(base), result.adapter, version="0.1.1"))
    assert all(merged.tensors[k].data == again.tensors[k].data for k in merged.tensors)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid:RuntimeWarning")
def test_worse_adaptations_roll_back(base: bytes) -> None:
    wild = adapt(base, NEW, AdaptConfig(steps=20, seq_len=32, lr=50.0), corpus=TEXT)
    assert not wild.accepted and "diverged" in wild.reason, wild.reason
    strict = adapt(base, NEW, AdaptConfig(steps=10, seq_len=32, min_improvement=100.0), corpus=TEXT)
    assert not strict.accepted and "does not beat" in strict.reason
    assert strict.held_out_after is not None  # it trained, measured, and rolled back
    # No rehearsal, a zero bound: the original corpus's loss rises and that is refused.
    forgetful = adapt(
        base,
        NEW,
        AdaptConfig(steps=40, seq_len=32, lr=3e-2, rehearsal=0.0, max_forgetting=0.0),
        corpus=TEXT,
    )
    assert not forgetful.accepted and "forgetting" in forgetful.reason, forgetful.reason
    idle = adapt(base, NEW, AdaptConfig(steps=0), corpus=TEXT)
    assert not idle.accepted and idle.held_out_after is None
    for result in (wild, strict, forgetful, idle):
        assert result.adapter is None and result.package is None and result.version is None
    with pytest.raises(InputError, match="need at least 2"):
        adapt(base, [NEW[0], "  "], QUICK, corpus=TEXT)
    int8 = convert_package(read_package(base), "int8")
    with pytest.raises(ConfigError, match="stored as int8"):
        adapt(int8, NEW, QUICK, corpus=TEXT)


@pytest.fixture(scope="module")
def base_mamba2() -> bytes:
    return tiny_package(name="adapt-ssd", steps=30, block="mamba2")


def test_adapting_a_mamba2_model_lowers_the_new_domain_loss_within_the_bound(
    base_mamba2: bytes,
) -> None:
    result = adapt(base_mamba2, NEW, QUICK, corpus=TEXT)
    print(json.dumps({k: v for k, v in result.to_dict().items() if k != "train"}, indent=1))
    assert result.accepted, result.reason
    assert result.held_out_after is not None and result.original_after is not None
    assert result.original_before is not None
    assert result.held_out_after < result.held_out_before - QUICK.min_improvement
    assert result.original_after - result.original_before <= DEFAULT_MAX_FORGETTING
    assert result.adapter is not None and result.package is not None
    assert result.adapter.targets == ("in_proj", "out_proj")
    merged = read_package(result.package)
    assert merged.config["model_type"] == "mamba2" and merged.version == "0.1.1"
    again = read_package(merge_package(read_package(base_mamba2), result.adapter, version="0.1.1"))
    assert all(merged.tensors[k].data == again.tensors[k].data for k in merged.tensors)


def test_worse_mamba2_adaptations_roll_back_and_mamba1_targets_are_refused(
    base_mamba2: bytes,
) -> None:
    strict = AdaptConfig(steps=5, seq_len=32, min_improvement=100.0)
    result = adapt(base_mamba2, NEW, strict, corpus=TEXT)
    assert not result.accepted and "does not beat" in result.reason, result.reason
    assert result.adapter is None and result.package is None
    forgetful = adapt(
        base_mamba2,
        NEW,
        AdaptConfig(steps=20, seq_len=32, lr=3e-2, rehearsal=0.0, max_forgetting=0.0),
        corpus=TEXT,
    )
    assert not forgetful.accepted and "forgetting" in forgetful.reason, forgetful.reason
    with pytest.raises(ConfigError, match=r"mamba2 block has no \['x_proj'\] projection"):
        adapt(base_mamba2, NEW, AdaptConfig(targets=("in_proj", "x_proj")), corpus=TEXT)


def test_cli_writes_only_when_accepted_and_keeps_the_previous_model(
    base: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.evermind"
    model.write_bytes(base)
    domain = tmp_path / "rivers.md"
    domain.write_text("\n\n".join(NEW), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    common = [str(model), str(domain), "--corpus", str(corpus), "--seq-len", "32"]
    # Rolled back: nothing is written, the model's bytes are unchanged.
    code = cli_main(["adapt", *common, "--out", str(tmp_path / "new.evermind"),
                     "--steps", "5", "--min-improvement", "100"])  # fmt: skip
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and not line["accepted"] and line["out"] is None
    assert not (tmp_path / "new.evermind").exists() and model.read_bytes() == base
    # Accepted in place: the old bytes become m.evermind.prev, the adapter is written alone.
    adapter = tmp_path / "rivers.lora.safetensors"
    code = cli_main(["adapt", *common, "--in-place", "--steps", "30", "--lr", "1e-2",
                     "--adapter-out", str(adapter)])  # fmt: skip
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 0 and line["accepted"], line["reason"]
    assert "adapt [" in captured.err  # the progress bar
    assert (tmp_path / "m.evermind.prev").read_bytes() == base
    assert read_package(model.read_bytes()).version == "0.1.1"
    loaded = read_adapter(adapter.read_bytes())
    assert loaded.base_digest == read_package(base).digest
    assert line["adapter_bytes"] == adapter.stat().st_size < len(base)
    # The exported adapter merged onto its base again gives the adapted model's weights ...
    again = tmp_path / "again.evermind"
    code = cli_main(["merge-adapter", str(tmp_path / "m.evermind.prev"), str(adapter),
                     "--out", str(again)])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["out"] == str(again)
    adapted, remerged = read_package(model.read_bytes()), read_package(again.read_bytes())
    assert all(adapted.tensors[k].data == remerged.tensors[k].data for k in adapted.tensors)
    # ... and fits only that base: on the adapted model it is refused.
    code = cli_main(["merge-adapter", str(model), str(adapter), "--out", str(tmp_path / "x")])
    assert code == 2 and "refused on" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(PackageError, match="refused on"):
        merge_package(adapted, loaded)


def test_cli_adapts_a_mamba2_package(
    base_mamba2: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "ssd.evermind"
    model.write_bytes(base_mamba2)
    domain = tmp_path / "rivers.md"
    domain.write_text("\n\n".join(NEW), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    common = [str(model), str(domain), "--corpus", str(corpus), "--seq-len", "32"]
    out, adapter = tmp_path / "new.evermind", tmp_path / "new.lora.safetensors"
    code = cli_main(["adapt", *common, "--out", str(out), "--steps", "30", "--lr", "1e-2",
                     "--adapter-out", str(adapter)])  # fmt: skip
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and line["accepted"], line["reason"]
    assert read_package(out.read_bytes()).config["model_type"] == "mamba2"
    assert read_adapter(adapter.read_bytes()).targets == ("in_proj", "out_proj")
    assert model.read_bytes() == base_mamba2
    again = tmp_path / "again.evermind"
    assert cli_main(["merge-adapter", str(model), str(adapter), "--out", str(again)]) == 0
    capsys.readouterr()
    merged, remerged = read_package(out.read_bytes()), read_package(again.read_bytes())
    assert all(merged.tensors[k].data == remerged.tensors[k].data for k in merged.tensors)
    # dt_proj is a Mamba-1 projection: refused up front, nothing written.
    refused = tmp_path / "dt.evermind"
    assert cli_main(["adapt", *common, "--out", str(refused), "--dt-proj"]) == 2
    assert "a mamba2 block has no ['x_proj', 'dt_proj'] projection" in capsys.readouterr().err
    assert not refused.exists()


def test_cli_refuses_bad_arguments(base: bytes, tmp_path: Path, capsys) -> None:
    model = tmp_path / "m.evermind"
    model.write_bytes(base)
    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(NEW), encoding="utf-8")
    cases = [
        (["--out", str(model)], "is the model itself"),
        (["--out", str(tmp_path / "o.evermind"), "--rank", "0"], "rank"),
        (["--out", str(tmp_path / "o.evermind"), "--adapter-out", "a.bin"], ".lora.safetensors"),
    ]
    for extra, message in cases:
        assert cli_main(["adapt", str(model), str(text), *extra]) == 2
        assert message in capsys.readouterr().err
    assert cli_main(["adapt", str(model), str(tmp_path / "none.txt"), "--in-place"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert model.read_bytes() == base and not (tmp_path / "o.evermind").exists()


def test_split_text_joins_paragraphs() -> None:
    text = "a" * 300 + "\n\n" + "b" * 400 + "\n\n\n" + "c" * 700 + "\n\n" + "d"
    assert [len(t) for t in split_text(text)] == [702, 700, 1]


def test_cli_push_serves_the_adapted_version_only_when_accepted(
    base: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], server, alpha
) -> None:
    """``evermind adapt --push URL`` against a real runtime on loopback: a rollback pushes
    nothing and ``evermind/<name>`` stays the served base; an accepted adaptation is pushed
    and from then on answers as ``evermind/<name>``, with the adapted package's own tokens."""
    from evermind import load
    from evermind.runtime.push import push_package
    from tests.runtime.helpers import TOKEN_A, model_ids

    model = tmp_path / "m.evermind"
    model.write_bytes(base)
    assert push_package(model, server.url, TOKEN_A)["id"] == "evermind/adapt-base:0.1.0"
    domain = tmp_path / "rivers.md"
    domain.write_text("\n\n".join(NEW), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    common = [str(model), str(domain), "--corpus", str(corpus), "--seq-len", "32"]
    common += ["--push", server.url, "--token", TOKEN_A]
    out = tmp_path / "new.evermind"

    def served() -> dict:
        body = {"model": "evermind/adapt-base", "prompt": "The river of", "max_tokens": 8,
                "temperature": 0}  # fmt: skip
        response = alpha.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    code = cli_main(["adapt", *common, "--out", str(out), "--steps", "5",
                     "--min-improvement", "100"])  # fmt: skip
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and not line["accepted"] and line["pushed"] is None and not out.exists()
    assert "evermind/adapt-base:0.1.1" not in model_ids(alpha)
    assert served()["model"] == "evermind/adapt-base:0.1.0"

    code = cli_main(["adapt", *common, "--out", str(out), "--steps", "30", "--lr", "1e-2"])
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 0 and line["accepted"], line["reason"]
    assert line["pushed"] == "evermind/adapt-base:0.1.1" and "serves" in captured.err
    answer = served()
    assert answer["model"] == "evermind/adapt-base:0.1.1"
    local = load(out.read_bytes()).complete("The river of", max_new_tokens=8, temperature=0)
    assert answer["choices"][0]["text"] == local.text
    # A URL that is not one is refused before any training.
    assert cli_main(["adapt", *common[:-4], "--out", str(tmp_path / "x.evermind"),
                     "--push", "localhost:1"]) == 2  # fmt: skip
    assert "expected the http(s) URL" in capsys.readouterr().err
