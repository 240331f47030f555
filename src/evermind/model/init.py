"""Deterministic initial weights of the Mamba model, bit-identical on every host.

This module owns :func:`init_params`. The browser (Pyodide) and the native side must start
from the same bytes for the same seed, so it uses only ``random.Random`` (Mersenne Twister,
platform-independent for an int seed) and plain IEEE-754 arithmetic. ``math.log``/``exp`` come
from the host's C library, which may differ in the last bit between glibc and the musl/wasm
libm Pyodide ships; the few transcendental functions needed here are therefore computed with
short series of +, -, *, / only (see ``_log``, ``_exp``, ``_expm1``), which IEEE-754 rounds
identically everywhere. ``math.sqrt``, ``math.frexp`` and ``math.ldexp`` are exact or correctly
rounded by the standard, so they are safe.

Browser-safe: imports only the standard library and ``evermind``.

The init follows Mamba-1:
- embedding ~ N(0, 0.02);
- in_proj, x_proj, out_proj ~ U(±1/sqrt(fan_in)) like ``nn.Linear``; out_proj is further
  divided by sqrt(n_layer) (prenorm residual rescale);
- conv1d weight and bias ~ U(±1/sqrt(d_conv)) like ``nn.Conv1d`` (fan_in = d_conv, depthwise);
- dt_proj.weight ~ U(±dt_scale / sqrt(dt_rank));
- dt_proj.bias = softplus^-1(dt), dt = exp(U(log dt_min, log dt_max)) clamped to >= dt_init_floor;
- A_log[d, n] = log(n + 1) (S4D-real); D = 1; RMSNorm weights = 1.

A Mamba-2 model (``config.block == "mamba2"``) follows ``Mamba2Mixer.init_mamba2_weights``
with the same linear and conv rules: per head A_log[h] = log(h + 1), D[h] = 1 and
dt_bias[h] = softplus^-1(dt) drawn as above; the gated norm's weight = 1.

The cortex (``moe_experts > 0``) follows Qwen2-MoE: the router ``moe.gate.weight`` ~ N(0, 0.02)
(HF ``initializer_range``); every expert projection and the shared expert's gate ~
U(±1/sqrt(fan_in)) like ``nn.Linear``, the ``down_proj`` ones further divided by sqrt(n_layer)
as out_proj; ``moe_norm.weight`` = 1.

Random numbers are drawn from one stream in :meth:`MambaConfig.param_shapes` order, each tensor
in row-major (PyTorch) order.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Callable

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig

__all__ = ["init_params"]

EMBEDDING_STD = 0.02

_LN2 = 0.6931471805599453  # nearest double to ln(2)
# ln(2) split so that k * _LN2_HI is exact for |k| < 2**20 (Cody-Waite argument reduction).
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_SQRT_HALF = 0.7071067811865476


def _log(x: float) -> float:
    """Natural log of a positive finite double with arithmetic only (relative error ~1e-16)."""
    mantissa, exponent = math.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= mantissa < 1
    if mantissa < _SQRT_HALF:
        mantissa *= 2.0
        exponent -= 1
    # log(m) = 2 atanh(t), t = (m-1)/(m+1), |t| <= 0.172: 12 odd terms reach double precision.
    t = (mantissa - 1.0) / (mantissa + 1.0)
    t2 = t * t
    series = 0.0
    for k in range(23, 0, -2):
        series = series * t2 + 1.0 / k
    return exponent * _LN2 + 2.0 * t * series


def _exp(x: float) -> float:
    """e**x with arithmetic only (relative error ~1e-16); x within the double range."""
    k = round(x / _LN2)
    r = (x - k * _LN2_HI) - k * _LN2_LO  # |r| <= ln(2)/2: 18 Taylor terms reach double precision
    total = 1.0
    for i in range(18, 0, -1):
        total = 1.0 + total * r / i
    return math.ldexp(total, k)


def _expm1(x: float) -> float:
    """e**x - 1 without cancellation for small |x|, arithmetic only."""
    if abs(x) >= 0.5:
        return _exp(x) - 1.0
    total = 1.0
    for i in range(20, 1, -1):
        total = 1.0 + total * x / i
    return x * total


def _uniform(rng: random.Random, count: int, bound: float) -> list[float]:
    """``count`` draws of U(-bound, bound)."""
    draw = rng.random
    return [bound * (2.0 * draw() - 1.0) for _ in range(count)]


def _normal(rng: random.Random, count: int, std: float) -> list[float]:
    """``count`` draws of N(0, std**2) by Marsaglia's polar method (needs log and sqrt only)."""
    draw = rng.random
    values: list[float] = []
    while len(values) < count:
        u = 2.0 * draw() - 1.0
        v = 2.0 * draw() - 1.0
        s = u * u + v * v
        if s == 0.0 or s >= 1.0:
            continue  # rejection: keep only points strictly inside the unit disc
        factor = std * math.sqrt(-2.0 * _log(s) / s)
        values.append(u * factor)
        values.append(v * factor)
    del values[count:]
    return values


def _dt_bias(rng: random.Random, config: MambaConfig, count: int) -> list[float]:
    """softplus^-1 of log-uniform time steps, so softplus(bias) starts in [dt_min, dt_max]."""
    log_min, log_max = _log(config.dt_min), _log(config.dt_max)
    values: list[float] = []
    for _ in range(count):
        dt = _exp(rng.random() * (log_max - log_min) + log_min)
        dt = max(dt, config.dt_init_floor)
        # softplus^-1(dt) = log(exp(dt) - 1) = dt + log(1 - exp(-dt)), stable for small dt.
        values.append(dt + _log(-_expm1(-dt)))
    return values


#: The cortex router's N(0, std) (HF ``initializer_range``).
ROUTER_STD = 0.02


def _cortex_values(
    rng: random.Random, config: MambaConfig, name: str, shape: tuple[int, ...]
) -> list[float]:
    """The initial values of one cortex tensor (rules in the module docstring)."""
    count = math.prod(shape)
    if name.endswith("moe_norm.weight"):
        return [1.0] * count
    if name.endswith("moe.gate.weight"):
        return _normal(rng, count, ROUTER_STD)
    bound = 1.0 / math.sqrt(shape[-1])  # (out, in): fan_in is the last axis
    if name.endswith("down_proj.weight"):
        bound /= math.sqrt(config.n_layer)
    return _uniform(rng, count, bound)


def init_params(config: MambaConfig, seed: int) -> dict[str, array[float]]:
    """Create the initial weights of a model, identical to the bit on every host.

    Args:
        config: The model's hyperparameters.
        seed: Any int; the same (config, seed) always gives the same bytes.

    Returns:
        One flat ``array('f')`` (float32, row-major PyTorch layout) per name of
        ``config.param_shapes()``, in that order.

    Raises:
        ConfigError: ``seed`` is not an int.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(
            f"init_params: expected an int seed, got {seed!r} ({type(seed).__name__}); "
            "hint: pass e.g. seed=0"
        )
    rng = random.Random(seed)
    d_inner, d_state = config.d_inner, config.d_state
    linear_bound = {  # 1/sqrt(fan_in), nn.Linear's default (kaiming_uniform with a=sqrt(5))
        "in_proj.weight": 1.0 / math.sqrt(config.d_model),
        "x_proj.weight": 1.0 / math.sqrt(d_inner),
        "out_proj.weight": 1.0 / math.sqrt(d_inner) / math.sqrt(config.n_layer),
        "conv1d.weight": 1.0 / math.sqrt(config.d_conv),
        "conv1d.bias": 1.0 / math.sqrt(config.d_conv),
        "dt_proj.weight": config.dt_scale / math.sqrt(config.dt_rank),
    }
    if config.block == "mamba2":  # one A per head: log(1), log(2), ..., log(H)
        a_log = [_log(h + 1.0) for h in range(config.n_heads)]
    else:  # one row per channel: log(1), ..., log(N)
        a_log = [_log(n + 1.0) for n in range(d_state)] * d_inner
    constant: dict[str, Callable[[int], list[float]]] = {
        "norm.weight": lambda count: [1.0] * count,
        "norm_f.weight": lambda count: [1.0] * count,
        "mixer.A_log": lambda count: a_log,
        "mixer.D": lambda count: [1.0] * count,
    }

    params: dict[str, array[float]] = {}
    for name, shape in config.param_shapes().items():
        count = math.prod(shape)
        # The last two name parts: "in_proj.weight", "mixer.A_log", "norm.weight", ...
        short = ".".join(name.rsplit(".", 2)[-2:])
        if name == "backbone.embeddings.weight":
            values = _normal(rng, count, EMBEDDING_STD)
        elif short in constant:
            values = constant[short](count)
        elif short in ("dt_proj.bias", "mixer.dt_bias"):
            values = _dt_bias(rng, config, count)
        elif ".moe" in name:
            values = _cortex_values(rng, config, name, shape)
        elif short in linear_bound:
            values = _uniform(rng, count, linear_bound[short])
        else:  # pragma: no cover - a new tensor in param_shapes must get an init rule here
            raise ConfigError(f"init_params: no init rule for parameter {name!r}")
        params[name] = array("f", values)
    return params
