"""The bench metrics of a language model on a text, from its summed statistics (browser-safe).

The CPU model (``evermind.model.inference``) and the tab (``evermind.studio``) both report these.
"""

from __future__ import annotations

import math


def lm_metrics(nll: float, count: int, top1: int, top5: int, seconds: float) -> dict[str, float]:
    """Cross-entropy (nats/token), perplexity, bits per token, top-1/top-5 accuracy, tokens/s.

    Args:
        nll: Summed negative log-likelihood of the targets, in nats.
        count: Number of predicted tokens.
        top1: Targets that were the most likely token.
        top5: Targets among the five most likely tokens.
        seconds: Wall time the evaluation took.
    """
    ce = nll / max(1, count)
    return {
        "cross_entropy": ce,
        "perplexity": math.exp(min(ce, 700.0)),  # exp overflows past ~709
        "bits_per_token": ce / math.log(2),
        "top1_accuracy": top1 / max(1, count),
        "top5_accuracy": top5 / max(1, count),
        "tokens": float(count),
        "tokens_per_second": count / seconds if seconds > 0 else 0.0,
    }
