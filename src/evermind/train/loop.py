"""The training loop, the same on every host and backend (browser-safe).

A :class:`Trainer` owns the schedule, the batches, evaluation, progress and checkpoints;
a backend owns the model and optimizer state and runs one step. Backends, both in this
package: the GPU one (``evermind.train.gpu_backend``, both transports) and the numpy CPU one
(``evermind.train.cpu_backend``, native-only). Everything a resumed run needs — weights,
optimizer moments, step, sampler position and RNG — goes into one checkpoint, so a resumed
run continues bit for bit as an uninterrupted one would on the same backend.
"""

from __future__ import annotations

import asyncio
import math
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol

from evermind.errors import TrainingDiverged
from evermind.train.checkpoint import pack_checkpoint, unpack_checkpoint
from evermind.train.data import BatchSampler, eval_windows
from evermind.train.schedule import Schedule
from evermind.types import Batch, Progress, TrainConfig, TrainResult

# The data types live in the leaf module evermind.types; they are re-exported here for the
# loop's callers.
__all__ = ["Backend", "Batch", "Progress", "TrainConfig", "TrainResult", "Trainer"]


class Backend(Protocol):
    """What the loop needs from a model + optimizer implementation."""

    async def train_step(self, micro_batches: list[Batch], lr: float, step: int) -> float:
        """One optimizer step over ``micro_batches`` (gradient accumulation); returns the mean
        loss. ``step`` is 1-based (AdamW bias correction)."""
        ...

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        """(sum of token losses in nats, number of tokens) for one batch."""
        ...

    async def state(self) -> dict[str, array[float]]:
        """Weights (HF names) and optimizer moments (``adam.m.<name>``, ``adam.v.<name>``)."""
        ...

    async def load_state(self, tensors: dict[str, array[float]]) -> None:
        """Restores what :meth:`state` returned."""
        ...


class Trainer:
    """Runs training steps on a backend with a schedule, evaluation and checkpoints.

    Args:
        backend: The model/optimizer implementation.
        train_tokens: Training token ids.
        held_out_tokens: Held-out token ids for evaluation.
        config: Optimisation settings.
        on_progress: Called after every step with a :class:`Progress`.
        on_checkpoint: Called with checkpoint bytes every ``checkpoint_every`` steps.
    """

    def __init__(
        self,
        backend: Backend,
        train_tokens: array[int],
        held_out_tokens: array[int],
        config: TrainConfig,
        on_progress: Callable[[Progress], None] | None = None,
        on_checkpoint: Callable[[bytes], None] | None = None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.schedule = Schedule.for_training(config)
        self.sampler = BatchSampler(train_tokens, config.batch_size, config.seq_len, config.seed)
        self.eval_set = eval_windows(
            held_out_tokens, config.batch_size, config.seq_len, config.eval_batches
        )
        self.on_progress = on_progress
        self.on_checkpoint = on_checkpoint
        self.step = 0
        self.tokens = 0
        self.losses: list[float] = []
        self.eval_losses: list[tuple[int, float]] = []
        self._train_seconds = 0.0

    async def evaluate(self) -> float | None:
        """Mean held-out loss (nats/token), or None when the held-out text is too short."""
        if not self.eval_set:
            return None
        total, count = 0.0, 0
        for batch in self.eval_set:
            loss_sum, n = await self.backend.eval_batch(batch)
            total += loss_sum
            count += n
        return total / max(1, count)

    async def run(
        self, steps: int | None = None, should_stop: Callable[[], bool] | None = None
    ) -> TrainResult:
        """Trains until ``config.steps`` (or ``steps`` more), or until ``should_stop()``."""
        cfg = self.config
        target = cfg.steps if steps is None else min(cfg.steps, self.step + steps)
        tokens_per_step = cfg.batch_size * cfg.seq_len * cfg.grad_accum
        while self.step < target:
            if should_stop is not None and should_stop():
                break
            micro = [self.sampler.next() for _ in range(cfg.grad_accum)]
            lr = self.schedule.lr(self.step)
            start = time.perf_counter()
            loss = await self.backend.train_step(micro, lr, self.step + 1)
            self._train_seconds += time.perf_counter() - start
            if not math.isfinite(loss):
                raise TrainingDiverged(self.step + 1, loss)
            self.step += 1
            self.tokens += tokens_per_step
            self.losses.append(loss)
            eval_loss = None
            if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == target):
                eval_loss = await self.evaluate()
                if eval_loss is not None:
                    self.eval_losses.append((self.step, eval_loss))
            if self.on_progress is not None:
                self.on_progress(
                    Progress(
                        self.step,
                        cfg.steps,
                        loss,
                        lr,
                        self.tokens,
                        self.tokens_per_second,
                        self._train_seconds,
                        eval_loss,
                        getattr(self.backend, "routing", None),
                    )
                )
            # Yield to the event loop once a step, so pause/stop requests and UI calls get in
            # even where the backend's awaits complete synchronously (wgpu-py, numpy).
            await asyncio.sleep(0)
            if (
                self.on_checkpoint
                and cfg.checkpoint_every
                and self.step % cfg.checkpoint_every == 0
            ):
                self.on_checkpoint(await self.checkpoint())
        return self.result()

    @property
    def tokens_per_second(self) -> float:
        """Training throughput so far (time inside backend steps only)."""
        return self.tokens / self._train_seconds if self._train_seconds > 0 else 0.0

    def result(self) -> TrainResult:
        """The summary of the run so far."""
        last_eval = self.eval_losses[-1][1] if self.eval_losses else None
        return TrainResult(
            steps=self.step,
            tokens=self.tokens,
            initial_loss=self.losses[0] if self.losses else float("nan"),
            final_loss=self.losses[-1] if self.losses else float("nan"),
            eval_loss=last_eval,
            tokens_per_second=round(self.tokens_per_second, 1),
            losses=list(self.losses),
            eval_losses=list(self.eval_losses),
        )

    async def checkpoint(self) -> bytes:
        """Everything needed to resume: backend state, step, sampler, history."""
        meta = {
            "step": self.step,
            "tokens": self.tokens,
            "sampler": self.sampler.state_dict(),
            "losses": self.losses,
            "eval_losses": self.eval_losses,
            "train_seconds": self._train_seconds,
            "config": asdict(self.config),
        }
        return pack_checkpoint(meta, await self.backend.state())

    async def restore(self, data: bytes) -> None:
        """Resumes from :meth:`checkpoint` bytes."""
        meta, tensors = unpack_checkpoint(data)
        await self.backend.load_state(tensors)
        self.step = int(meta["step"])
        self.tokens = int(meta["tokens"])
        self.sampler.load_state_dict(meta["sampler"])
        self.losses = [float(x) for x in meta["losses"]]
        self.eval_losses = [(int(s), float(v)) for s, v in meta["eval_losses"]]
        self._train_seconds = float(meta["train_seconds"])
