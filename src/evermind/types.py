"""Plain data types shared across layers: batches, training settings, progress, results.

A leaf module (standard library and ``evermind.errors`` only), so that the GPU model, the
CPU backend, the training loop, the job and the Studio can all name these values without
importing one another (``model/`` never imports ``train/``). Browser-safe.
"""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

from evermind.errors import ConfigError

Batch = tuple["array[int]", "array[int]"]  # (inputs, targets), flat row-major (B·L) int32


@dataclass
class TrainConfig:
    """Optimisation settings (the model's shape is a :class:`MambaConfig`).

    Defaults suit the nano preset on a few MB of text. The learning-rate schedule these
    settings describe is :meth:`evermind.train.schedule.Schedule.for_training`.
    """

    steps: int = 300
    batch_size: int = 4
    seq_len: int = 128
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 30
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_batches: int = 4
    checkpoint_every: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "grad_accum", "eval_batches"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TrainConfig.{name}: expected >= 1, got {getattr(self, name)}")
        if not 0 <= self.beta1 < 1 or not 0 <= self.beta2 < 1:
            raise ConfigError(
                f"TrainConfig betas must be in [0, 1), got {self.beta1}, {self.beta2}"
            )
        if self.grad_clip < 0 or self.weight_decay < 0:
            raise ConfigError("TrainConfig.grad_clip and weight_decay must be >= 0")


@dataclass
class Progress:
    """One progress report (sent to the Studio, the CLI's progress bar, tests)."""

    step: int
    steps: int
    loss: float
    lr: float
    tokens: int
    tokens_per_second: float
    elapsed_s: float
    eval_loss: float | None = None
    #: The cortex's routing at this step (:meth:`CpuMamba.loss_and_grads`' ``last_routing``:
    #: per layer the fraction of tokens routed to each expert and the load-balancing loss);
    #: None without the cortex or on a backend that does not report it.
    routing: dict[str, Any] | None = None


@dataclass
class TrainResult:
    """The training loop's summary; the CLI prints it as one JSON line."""

    steps: int
    tokens: int
    initial_loss: float
    final_loss: float
    eval_loss: float | None
    tokens_per_second: float
    losses: list[float] = field(default_factory=list)
    eval_losses: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


__all__ = ["Batch", "Progress", "TrainConfig", "TrainResult"]
