"""Terminal progress on stderr: a progress bar, and a printer of a job's events (native-only)."""

from __future__ import annotations

import sys
import time
from typing import Any

from evermind.job import JobEvent, ModelReady, Note, TokenizerProgress
from evermind.types import Progress


def routing_text(routing: dict[str, Any] | None) -> str:
    """`` aux 2.013 L0 31/22/25/22%`` for the cortex's routing (empty without it): the
    load-balancing loss, then per layer each expert's share of the routed (token, slot)
    assignments."""
    if not routing:
        return ""
    layers = []
    for index, layer in routing["layers"].items():
        total = sum(layer["fractions"]) or 1.0
        shares = "/".join(f"{100 * f / total:.0f}" for f in layer["fractions"])
        layers.append(f"L{index} {shares}%")
    return f" aux {routing['aux_loss']:.3f} " + " ".join(layers)


class ProgressBar:
    """A one-line terminal progress bar on stderr (redrawn at most 10 times a second)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, max(1, total)
        self.start = time.perf_counter()
        self._last = 0.0
        self.tty = sys.stderr.isatty()

    def update(self, done: int, extra: str = "", force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        frac = min(1.0, done / self.total)
        elapsed = now - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        bar = "#" * int(frac * 24)
        line = (
            f"{self.label} [{bar:<24}] {done}/{self.total} {extra} {elapsed:5.1f}s eta {eta:5.1f}s"
        )
        if self.tty:
            sys.stderr.write("\r" + line[:160].ljust(120))
            if done >= self.total:
                sys.stderr.write("\n")
        elif done >= self.total or force:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


class JobPrinter:
    """Shows a job's events on stderr: notes and the model as lines, progress as bars.

    A bar starts at its first event unless :meth:`start` started it before (so that its
    clock includes what comes before the first report, e.g. the first training step).
    """

    def __init__(self) -> None:
        self.bars: dict[str, ProgressBar] = {}

    def start(self, label: str, total: int) -> None:
        """Starts the ``tokenizer`` or ``train`` bar now."""
        self.bars[label] = ProgressBar(label, total)

    def __call__(self, event: JobEvent) -> None:
        if isinstance(event, TokenizerProgress):
            bar = self.bars.setdefault("tokenizer", ProgressBar("tokenizer", event.total))
            if event.finished:
                bar.total = max(1, event.total)  # the tab's total can shrink on the way
                bar.update(bar.total, force=True)
            else:
                bar.update(event.done)
        elif isinstance(event, Progress):
            bar = self.bars.setdefault("train", ProgressBar("train", event.steps))
            ev = f" eval {event.eval_loss:.3f}" if event.eval_loss is not None else ""
            bar.update(
                event.step,
                f"loss {event.loss:.3f}{ev}{routing_text(event.routing)} "
                f"{event.tokens_per_second:,.0f} tok/s",
                force=event.eval_loss is not None,
            )
        elif isinstance(event, ModelReady):
            print(
                f"model: {event.preset}, {event.n_params:,} parameters, vocab {event.vocab_size}; "
                f"{event.train_tokens:,} training tokens, {event.held_out_tokens:,} held out",
                file=sys.stderr,
            )
        elif isinstance(event, Note):
            line = f"{event.topic}: {event.text}".rstrip()
            print(f"\n{line}" if event.interrupts else line, file=sys.stderr)
