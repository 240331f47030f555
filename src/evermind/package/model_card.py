"""The ``README.md`` model card written into every `.evermind` package.

This module owns the card's text: a small YAML front matter for model hubs, what the model
is, what it was trained on, its metrics, and how to use it with the Evermind runtime (an
OpenAI client on ``evermind/<name>:<version>``) and with ``transformers``. The card is a
pure function of the manifest, so it is as reproducible as the rest of the package.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _cell(value: Any) -> str:
    """Render a value for a Markdown table cell (JSON for non-strings, pipes escaped)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text.replace("|", "\\|").replace("\n", " ")


def _code_list(tokens: Mapping[str, int]) -> str:
    """Render special tokens as inline code with their ids, or say there are none."""
    if not tokens:
        return "none"
    return ", ".join(f"`{token}` ({tokens[token]})" for token in sorted(tokens))


def _table(rows: Mapping[str, Any], empty: str) -> list[str]:
    """Render a two-column Markdown table, or a line saying there is nothing."""
    if not rows:
        return [empty]
    lines = ["| name | value |", "| --- | --- |"]
    lines.extend(f"| {_cell(key)} | {_cell(rows[key])} |" for key in sorted(rows))
    return lines


def _corpus_line(training: Mapping[str, Any]) -> str:
    """Say what the model was trained on, from the training summary."""
    corpus = training.get("corpus") or training.get("corpus_description")
    tokens = training.get("tokens")
    steps = training.get("steps")
    parts = [f"Trained on: {_cell(corpus)}." if corpus else "Training corpus: not described."]
    if tokens is not None or steps is not None:
        parts.append(f"{_cell(steps)} steps over {_cell(tokens)} tokens.")
    return " ".join(parts)


_TRANSFORMERS = [
    "## Use with transformers",
    "",
    "The archive is a plain ZIP; unpacked, it is a `transformers` model directory:",
    "",
    "```python",
    "# unzip model.evermind -d model",
    "from transformers import MambaForCausalLM, PreTrainedTokenizerFast",
    "",
    'model = MambaForCausalLM.from_pretrained("model")',
    'tokenizer = PreTrainedTokenizerFast(tokenizer_file="model/tokenizer.json")',
    'ids = tokenizer("The memory of", return_tensors="pt").input_ids',
    "print(tokenizer.decode(model.generate(ids, max_new_tokens=32)[0]))",
    "```",
]
_INT8_TRANSFORMERS = [
    "## Not for transformers",
    "",
    "The weights are int8 with one float32 scale per row (Evermind's own scheme, named in",
    "`config.json` as `quant_method: evermind_int8`); `transformers` has no loader for it",
    "and refuses the directory (`torch_dtype` is int8). `evermind.load` runs it as it is.",
    "For `transformers`, convert it first:",
    "",
    "```sh",
    "evermind export --model model.evermind --dtype float32 --out model-f32.evermind",
    "```",
]


def _storage_line(manifest: Mapping[str, Any]) -> str:
    """How the weights are stored, for the card's parameter line."""
    dtype = manifest["model"]["dtype"]
    if dtype != "int8":
        return str(dtype)
    count = len(manifest.get("quantization", {}).get("tensors", []))
    return f"int8 per output row ({count} weight matrices, float32 scales); the rest float32"


def render_model_card(manifest: Mapping[str, Any]) -> str:
    """Write the model card for a package.

    Args:
        manifest: A manifest (the ``files`` table is not needed and not shown).

    Returns:
        Markdown text ending in a newline.
    """
    name, version = manifest["name"], manifest["version"]
    model, tokenizer = manifest["model"], manifest["tokenizer"]
    ref = f"evermind/{name}:{version}"
    int8 = model["dtype"] == "int8"
    lines = [
        "---",
        f"library_name: {'evermind' if int8 else 'transformers'}",
        "pipeline_tag: text-generation",
        "tags: [evermind, mamba, ssm]",
        "---",
        "",
        f"# {name} {version}",
        "",
        f"A small Mamba (selective state-space) language model trained with Evermind by "
        f"`{_cell(manifest['producer'])}` on {manifest['created_at']}.",
        "",
        f"- Architecture: {model['n_layer']} Mamba blocks, d_model {model['d_model']}, "
        f"d_inner {model['d_inner']}, d_state {model['d_state']}, d_conv {model['d_conv']}, "
        f"dt_rank {model['dt_rank']}; tied embeddings",
        f"- Parameters: {model['n_params']:,} stored as {_storage_line(manifest)}",
        f"- Tokenizer: {tokenizer['type']}, {tokenizer['vocab_size']} tokens; special tokens: "
        f"{_code_list(tokenizer['special_tokens'])}",
        "",
        "## Training",
        "",
        _corpus_line(manifest["training"]),
        "",
        *_table(manifest["training"], "No training summary was recorded."),
        "",
        "## Metrics",
        "",
        *_table(manifest["bench"], "No benchmark was run."),
        "",
        "## Use with the Evermind runtime",
        "",
        f"Install this package on a runtime; it is then served as `{ref}` on the runtime's",
        "OpenAI-compatible API:",
        "",
        "```python",
        "from openai import OpenAI",
        "",
        'client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="YOUR_TOKEN")',
        "reply = client.completions.create(",
        f'    model="{ref}", prompt="The memory of", max_tokens=64',
        ")",
        "print(reply.choices[0].text)",
        "```",
        "",
        *(_INT8_TRANSFORMERS if int8 else _TRANSFORMERS),
        "",
        "## Files",
        "",
        "`manifest.json` (checksums and summaries), `config.json`, `model.safetensors`,",
        "`tokenizer.json`, `generation_config.json` and this card. The runtime verifies every",
        "checksum before it serves the model.",
        "",
    ]
    return "\n".join(lines)
