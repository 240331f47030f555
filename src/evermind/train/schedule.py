"""Learning-rate schedule: linear warmup, then cosine decay to a floor (browser-safe)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from evermind.errors import ConfigError
from evermind.types import TrainConfig


@dataclass(frozen=True)
class Schedule:
    """Warmup + cosine learning-rate schedule.

    Attributes:
        max_lr: Peak learning rate, reached at the end of warmup.
        total_steps: Steps in the whole run; the cosine reaches ``min_lr`` there.
        warmup_steps: Linear warmup length (step 0 uses ``max_lr / warmup_steps``).
        min_lr: Floor of the cosine decay.
    """

    max_lr: float
    total_steps: int
    warmup_steps: int = 0
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        if not (self.max_lr > 0 and math.isfinite(self.max_lr)):
            raise ConfigError(f"Schedule.max_lr: expected a finite number > 0, got {self.max_lr}")
        if self.total_steps < 1:
            raise ConfigError(f"Schedule.total_steps: expected >= 1, got {self.total_steps}")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ConfigError(
                f"Schedule.warmup_steps: expected 0..{self.total_steps}, got {self.warmup_steps}"
            )
        if not 0 <= self.min_lr <= self.max_lr:
            raise ConfigError(f"Schedule.min_lr: expected 0..max_lr, got {self.min_lr}")

    @classmethod
    def for_training(cls, config: TrainConfig) -> Schedule:
        """The schedule that training settings describe (warmup capped at ``steps``)."""
        return cls(config.lr, config.steps, min(config.warmup_steps, config.steps), config.min_lr)

    def lr(self, step: int) -> float:
        """Learning rate for 0-based ``step``."""
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay_steps)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(math.pi * progress))
