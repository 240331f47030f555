"""The one exception tree of Evermind.

Every error the package raises on purpose derives from :class:`EvermindError`, so a
caller can catch the whole family with one clause and a narrower branch when it cares.
Domain errors are raised where they arise (the module in brackets defines the ones that
carry domain data); the generic branches are defined here::

    EvermindError
    ├── ConfigError              bad configuration or user-supplied options (also ValueError)
    │   └── InvalidConfig        a host's MCP config cannot be edited safely [mcp.installer]
    ├── InputError               bad input data: a request field, a file's contents, a missing
    │   │                        input file; not a setting (also ValueError)
    │   └── RefusedFile          a path that is not a regular file inside its folder [safefiles]
    ├── ShapeError               an array/tensor of the wrong shape or dtype (also ValueError)
    ├── NotFound                 a named thing does not exist
    │   └── ModelNotFound        no such model for this tenant [runtime.registry]
    ├── Conflict                 the request contradicts what is already stored
    │   ├── InstallConflict      the ref is installed with another digest [runtime.installs]
    │   └── VersionConflict      a conditional memory write found the namespace moved on
    ├── Unavailable              the thing exists but cannot serve now
    │   ├── PackageChanged       an installed package's bytes changed on disk [runtime.registry]
    │   └── UpstreamError        a frontier model's server failed, refused or cut a stream
    ├── AccessError              the caller may not do this now
    │   ├── Unauthenticated      no, or an unknown, bearer token [auth]
    │   ├── PermissionDenied     a read-only token asked to write [auth]
    │   ├── RateLimited          the tenant's request budget is spent [auth]
    │   └── ScopeRequired        a vector-store query or count came without an AccessScope
    │                            [vectorstore.port]
    ├── GraphError               an agent graph's run cannot go on
    │   ├── NodeError            a node (or its router) raised; carries node and step
    │   │                        [agent.graph.errors]
    │   ├── InvalidUpdate        a node's update does not fit the state: an unknown key, two
    │   │                        writes to a key without a reducer, not JSON [agent.graph.errors]
    │   └── GraphRecursionError  a run took more supersteps than its limit [agent.graph.errors]
    ├── TrainingDiverged         a training run's loss became non-finite
    ├── CheckpointError          a training checkpoint is truncated, of another format
    │                            version, or inconsistent [train.checkpoint]
    ├── GPUError                 anything that went wrong talking to WebGPU
    │   ├── NoAdapterError       no WebGPU adapter on this host (with a hint how to get one)
    │   ├── ShaderCompileError   WGSL failed to compile; carries file, line and column
    │   └── DeviceLostError      the device was lost (driver reset, out of memory)
    ├── TokenizerError           tokenizer training/loading/encoding failed
    ├── PackageError             a `.evermind` package is invalid, corrupt or unsafe
    ├── StorageError             the memory / cache storage backend failed
    │   └── StoreUnavailable     a shared store (Postgres, a REST store) cannot serve now (also
    │                            Unavailable)
    ├── BundleError              the offline web bundle could not be built or found
    ├── DraftError               the Studio's saved draft is of another version, partial or
    │                            corrupt [studio.draft]
    ├── Cancelled                the user cancelled a long Studio operation; nothing of it was
    │                            kept [studio.operations]
    ├── PushError                the runtime refused a push, or was unreachable [runtime.push]
    └── ApiError                 an HTTP answer the runtime's routes refuse a request with: its
                                 status, OpenAI error fields and headers [runtime.errors]

Library code raises these and never an HTTP error (``ApiError`` is the runtime's own, raised
only inside ``runtime/``); the runtime maps the others to HTTP statuses in one table
(``runtime/app.py``), the Studio worker sends their class name to the page. Every
error has a ``code``, a short machine-readable reason (``"model_not_found"``; empty when the
class says enough), which the runtime sends as the error's ``code``.

Messages say what was expected, what was received, and a hint.
"""

from __future__ import annotations

from collections.abc import Iterable


class EvermindError(Exception):
    """Base class of every error Evermind raises on purpose.

    Args:
        *args: The message (what was expected, what was received, a hint).
        code: A short machine-readable reason, e.g. ``"invalid_namespace"``; None keeps the
            class's (empty unless the class sets one).
    """

    code: str = ""

    def __init__(self, *args: object, code: str | None = None) -> None:
        super().__init__(*args)
        if code is not None:
            self.code = code


class ConfigError(EvermindError, ValueError):
    """A configuration value or user option is invalid."""


class InputError(EvermindError, ValueError):
    """Input data is invalid or missing: a request's field, a file's contents, an input file.

    Not for settings (that is :class:`ConfigError`): the fix is to change the data.
    """


class ShapeError(EvermindError, ValueError):
    """An input has the wrong shape, size or dtype for the operation."""


class NotFound(EvermindError):
    """A named thing (a model, an entry) does not exist, or not for this caller."""


class Conflict(EvermindError):
    """The request contradicts what is already stored (e.g. the same ref, other bytes)."""


class VersionConflict(Conflict):
    """A memory write conditioned on the namespace's version found another version: someone
    wrote in between. Nothing was written; decide again on a fresh read and retry."""


class Unavailable(EvermindError):
    """The thing exists but cannot serve now; retrying later or re-sending it may help."""


class UpstreamError(Unavailable):
    """An upstream language model (Claude, GPT, any OpenAI-compatible server) failed.

    Attributes:
        provider: ``anthropic``, ``openai`` or ``evermind``.
        status: The upstream's HTTP status (None: no response: refused, timed out, cut).
        retry_after: Seconds the upstream asked to wait (429/503), when it said.
        code: ``upstream_rate_limited``, ``upstream_auth``, ``upstream_bad_request``,
            ``upstream_unavailable``, ``upstream_stream_cut`` or ``upstream_error``.
        reported: What the upstream's own error object said (``type``, ``message``,
            ``param``, ``code``; strings, secrets scrubbed, cut), when it said it (on a 5xx:
            only in its protocol's well-formed error shape): a relay in the same protocol
            answers a refused request, or the upstream's own 5xx, with it and its status, as
            the provider would.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retry_after: float | None = None,
        code: str = "upstream_error",
        reported: dict[str, str | None] | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.provider = provider
        self.status = status
        self.retry_after = retry_after
        self.reported = reported

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _upstream_error,
            (str(self), self.provider, self.status, self.retry_after, self.code, self.reported),
        )


def _upstream_error(
    message: str,
    provider: str,
    status: int | None,
    retry_after: float | None,
    code: str,
    reported: dict[str, str | None] | None = None,
) -> UpstreamError:
    return UpstreamError(
        message,
        provider=provider,
        status=status,
        retry_after=retry_after,
        code=code,
        reported=reported,
    )


class AccessError(EvermindError):
    """The caller may not do this now (no credentials, too little access, over its rate)."""


class GraphError(EvermindError):
    """An agent graph's run cannot go on (:mod:`evermind.agent.graph` defines the branches)."""


class TrainingDiverged(EvermindError):
    """A training run's loss became non-finite (NaN or infinity); its state is unusable.

    Attributes:
        step: The 1-based step whose loss diverged.
        loss: That loss.
    """

    def __init__(self, step: int, loss: float) -> None:
        super().__init__(
            f"training diverged at step {step}: loss is {loss}; "
            "lower the learning rate or enable gradient clipping"
        )
        self.step = step
        self.loss = loss

    def __reduce__(self) -> tuple[type[TrainingDiverged], tuple[int, float]]:
        return (type(self), (self.step, self.loss))


class GPUError(EvermindError):
    """WebGPU reported a failure (validation, out of memory, internal)."""


class NoAdapterError(GPUError):
    """No WebGPU adapter is available on this host."""


class DeviceLostError(GPUError):
    """The GPU device was lost; state on it is gone and must be rebuilt."""


class ShaderCompileError(GPUError):
    """A WGSL shader failed to compile.

    Attributes:
        shader: The shader file name (e.g. ``elementwise.wgsl``).
        line: 1-based line of the first error, or 0 when the compiler gave none.
        column: 1-based column of the first error, or 0 when unknown.
        detail: The compiler's own message.
    """

    def __init__(self, shader: str, line: int, column: int, detail: str) -> None:
        self.shader = shader
        self.line = line
        self.column = column
        self.detail = detail
        super().__init__(f"{shader}:{line}:{column}: WGSL compile error: {detail}")


class TokenizerError(EvermindError):
    """Tokenizer training, loading or encoding failed."""


class PackageError(EvermindError):
    """A `.evermind` package is invalid, corrupt, or unsafe to read."""


class StorageError(EvermindError):
    """The storage backend (SQLite, IndexedDB) failed or holds invalid data."""


class StoreUnavailable(StorageError, Unavailable):
    """A shared store (a Postgres server, a REST vector store) cannot serve now: the connection
    failed or was cut, or the store answered 429 / 5xx. The next call connects again, so retrying
    later may help (HTTP 503, Retry-After)."""

    code = "store_unavailable"


class BundleError(EvermindError):
    """The offline web bundle (dist/web) could not be built or is incomplete."""


def check_ranges(owner: str, checks: Iterable[tuple[str, object, float, float]]) -> None:
    """Raises :class:`ConfigError` for the first ``(name, value, low, high)`` whose value is
    not a number in ``[low, high]``; ``owner`` (e.g. ``"RecallOptions"``) starts the message."""
    for name, value, low, high in checks:
        if not (isinstance(value, int | float) and low <= value <= high):
            raise ConfigError(f"{owner}: {name} must be in [{low}, {high}], got {value!r}")
