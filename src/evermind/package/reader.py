"""Reading and verifying `.evermind` packages: where trust is decided.

This module owns :func:`read_package`. It refuses a package unless every check passes:
the archive is safe under :class:`~evermind.package.limits.PackageLimits` (checked before
anything is decompressed), the manifest is first and valid, the archive holds exactly the
members the manifest lists with matching sizes and sha256, the tensors are exactly those
``config.json`` implies with the right shapes and one dtype (an int8 package: the weights
its ``quantization`` field lists as ``I8`` with a fitting ``<name>_scale``, the rest
float32), and the tokenizer vocabulary, ``vocab_size`` and embedding rows agree. Every refusal is a
:class:`~evermind.errors.PackageError` whose message names the member or field.

Memory stays near the size of what is kept: the file is never read whole (its digest is
hashed in pieces), ``model.safetensors`` is hashed in one streamed pass and decoded in a
second, one tensor at a time, and a ``tokenizer.json`` larger than its vocabulary can need
(:data:`TOKENIZER_BYTES_PER_TOKEN`) or with more JSON values than it can use
(:data:`TOKENIZER_VALUES_PER_TOKEN`) is refused before it is parsed into Python objects,
which cost tens of times the text.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from evermind.errors import PackageError
from evermind.package._json import loads_object
from evermind.package.affect import AFFECT_FIELD, AFFECT_MEMBER, AffectHead, affect_from_member
from evermind.package.archive import SafeArchive
from evermind.package.head import HEAD_FIELD, HEAD_MEMBER, EmbedderHead, head_from_member
from evermind.package.int8 import (
    QUANT_FIELD,
    first_out_of_range,
    quantization_config,
    scale_name,
)
from evermind.package.limits import PackageLimits
from evermind.package.manifest import check_json_typed, validate_manifest
from evermind.package.safetensors_io import decode_safetensors, read_safetensors
from evermind.package.schema import (
    CONFIG,
    GENERATION_CONFIG,
    MANIFEST,
    README,
    REQUIRED_MEMBERS,
    TOKENIZER,
    WEIGHTS,
    check_tensors,
    config_dims,
    expected_tensor_shapes,
    model_summary,
    tokenizer_summary,
    tokenizer_vocab_size,
)
from evermind.package.static_member import (
    STATIC_FIELD,
    STATIC_MEMBER,
    StaticEmbedderFile,
    static_from_member,
)
from evermind.package.tensor import TORCH_TO_DTYPE, Tensor

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Package:
    """A verified `.evermind` package.

    Attributes:
        manifest: The parsed ``manifest.json``.
        config: The parsed ``config.json`` (``transformers`` MambaConfig names).
        tensors: Tensor name -> :class:`Tensor` holding float32 ``array('f')`` data
            (float16 packages are upcast exactly); in an int8 package the quantised
            weights stay ``"I8"`` tensors carrying their per-row ``scale`` (their
            ``to_float32()`` dequantises).
        tokenizer_json: The ``tokenizer.json`` text as stored.
        generation_config: The parsed ``generation_config.json``.
        readme: The ``README.md`` model card.
        digest: ``"sha256:<hex>"`` of the whole package file.
        embedder: The embedding head (``embedder.safetensors``), None when the package has
            none (it then embeds with the raw pooled vector).
        affect: The affect head (``affect.safetensors``), None when the package has none.
        static_embedder: The static embedder's file (``static_embedder.safetensors``), None
            when the package has none; when present, a loaded package embeds with it.
    """

    manifest: dict[str, Any]
    config: dict[str, Any]
    tensors: dict[str, Tensor]
    tokenizer_json: str
    generation_config: dict[str, Any]
    readme: str
    digest: str
    embedder: EmbedderHead | None = None
    affect: AffectHead | None = None
    static_embedder: StaticEmbedderFile | None = None

    @property
    def name(self) -> str:
        """The package name from the manifest."""
        return str(self.manifest["name"])

    @property
    def version(self) -> str:
        """The package version from the manifest."""
        return str(self.manifest["version"])

    @property
    def ref(self) -> str:
        """The model id a runtime serves it under: ``evermind/<name>:<version>``."""
        return f"evermind/{self.name}:{self.version}"


#: Bytes hashed per read when digesting the package file.
_CHUNK = 1 << 20
#: ``tokenizer.json`` bytes allowed per vocabulary entry, plus a fixed allowance: real files
#: take 13 (Evermind's) to about 70 (pretty-printed, escaped) bytes per entry.
TOKENIZER_BYTES_PER_TOKEN = 512
TOKENIZER_SLACK_BYTES = 256 * 1024
#: JSON values (counted as commas, before parsing) allowed per vocabulary entry, plus a fixed
#: allowance: a vocab entry and a merge (at most one per entry) take three.
TOKENIZER_VALUES_PER_TOKEN = 5
TOKENIZER_SLACK_VALUES = 65536


def _open_source(
    source: bytes | bytearray | memoryview | str | os.PathLike[str], limits: PackageLimits
) -> BinaryIO:
    """Open the package for reading, checking a file's size before anything is read."""
    if isinstance(source, bytes | bytearray | memoryview):
        return io.BytesIO(source)
    if not isinstance(source, str | os.PathLike):
        raise PackageError(
            f"package source is {type(source).__name__}; expected bytes or a file path"
        )
    path = os.fspath(source)
    try:
        stream = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as err:
        raise PackageError(f"archive {path!r}: cannot be read ({err})") from err
    try:
        size = os.fstat(stream.fileno()).st_size
    except OSError as err:
        stream.close()
        raise PackageError(f"archive {path!r}: cannot be read ({err})") from err
    if size > limits.max_archive_bytes:
        stream.close()
        raise PackageError(
            f"archive {path!r}: {size} bytes exceeds the limit of "
            f"{limits.max_archive_bytes} (PackageLimits.max_archive_bytes)"
        )
    return stream


def _file_digest(stream: BinaryIO) -> str:
    """``"sha256:<hex>"`` of the whole file, read in pieces."""
    digest = hashlib.sha256()
    stream.seek(0)
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while count := stream.readinto(view):  # type: ignore[attr-defined]
        digest.update(view[:count])
    return "sha256:" + digest.hexdigest()


def _check_member_set(
    archive: SafeArchive,
    files: Mapping[str, Any],
    head: bool,
    affect: bool = False,
    static: bool = False,
) -> None:
    """Require the archive to hold exactly the manifest's members, with listed sizes."""
    present = set(archive.names) - {MANIFEST}
    missing = sorted(set(files) - present)
    if missing:
        raise PackageError(
            f"member {missing[0]!r}: listed in {MANIFEST} files but missing from the archive"
        )
    unlisted = sorted(present - set(files))
    if unlisted:
        raise PackageError(
            f"member {unlisted[0]!r}: present in the archive but not listed in {MANIFEST} "
            "files; unlisted members are refused"
        )
    absent = [name for name in REQUIRED_MEMBERS if name not in files]
    if absent:
        raise PackageError(f"member {absent[0]!r}: required by format v2 but absent")
    if head != (HEAD_MEMBER in files):
        raise PackageError(
            f"member {HEAD_MEMBER!r}: {'required' if head else 'not allowed'} when "
            f"{MANIFEST} {'has' if head else 'has no'} an {HEAD_FIELD!r} field"
        )
    if affect != (AFFECT_MEMBER in files):
        raise PackageError(
            f"member {AFFECT_MEMBER!r}: {'required' if affect else 'not allowed'} when "
            f"{MANIFEST} {'has' if affect else 'has no'} an {AFFECT_FIELD!r} field"
        )
    if static != (STATIC_MEMBER in files):
        raise PackageError(
            f"member {STATIC_MEMBER!r}: {'required' if static else 'not allowed'} when "
            f"{MANIFEST} {'has' if static else 'has no'} a {STATIC_FIELD!r} field"
        )
    foreign = sorted(
        set(files) - set(REQUIRED_MEMBERS) - {HEAD_MEMBER, AFFECT_MEMBER, STATIC_MEMBER}
    )
    if foreign:
        raise PackageError(
            f"member {foreign[0]!r}: not part of format v2; expected only "
            f"{sorted(REQUIRED_MEMBERS)}"
        )
    for name in sorted(files):
        if archive.size(name) != files[name]["size"]:
            raise PackageError(
                f"member {name!r}: {MANIFEST} says {files[name]['size']} bytes but the "
                f"archive holds {archive.size(name)}"
            )


def _check_digest(name: str, digest: str, files: Mapping[str, Any]) -> None:
    """Require a member's sha256 to be the manifest's."""
    if digest != files[name]["sha256"]:
        raise PackageError(
            f"member {name!r}: sha256 is {digest} but {MANIFEST} says "
            f"{files[name]['sha256']}; the member was altered or corrupted"
        )


def _read_member(
    archive: SafeArchive, files: Mapping[str, Any], name: str, limits: PackageLimits
) -> bytes:
    """Read one listed member (not the weights) whole and verify its sha256."""
    if name in (HEAD_MEMBER, AFFECT_MEMBER, STATIC_MEMBER):
        data = archive.read(name, limit=limits.max_total_bytes, limit_name="max_total_bytes")
    else:
        data = archive.read(name, limit=limits.max_json_bytes, limit_name="max_json_bytes")
    _check_digest(name, hashlib.sha256(data).hexdigest(), files)
    return data


def _check_tokenizer_cost(archive: SafeArchive, vocab_size: int) -> None:
    """Refuse a ``tokenizer.json`` too large for its vocabulary before it is read.

    Parsing JSON into Python objects costs tens of bytes per input byte, so the size a
    tokenizer may declare is bounded by the vocabulary the weights pay for.
    """
    cap = TOKENIZER_SLACK_BYTES + TOKENIZER_BYTES_PER_TOKEN * vocab_size
    if archive.size(TOKENIZER) > cap:
        raise PackageError(
            f"{TOKENIZER}: {archive.size(TOKENIZER)} bytes for a vocabulary of {vocab_size} "
            f"tokens; expected at most {cap} ({TOKENIZER_BYTES_PER_TOKEN} bytes a token); "
            "refused before parsing"
        )


def _check_tokenizer_values(data: bytes, vocab_size: int) -> None:
    """Refuse a ``tokenizer.json`` with too many JSON values for its vocabulary, before it
    is parsed (each value becomes a Python object; merges beyond the vocabulary are never
    valid)."""
    values = data.count(b",")
    cap = TOKENIZER_SLACK_VALUES + TOKENIZER_VALUES_PER_TOKEN * vocab_size
    if values > cap:
        raise PackageError(
            f"{TOKENIZER}: holds about {values} JSON values (merges, vocab entries) for a "
            f"vocabulary of {vocab_size} tokens; expected at most {cap}; refused before parsing"
        )


def _read_weights(
    archive: SafeArchive, files: Mapping[str, Any], limits: PackageLimits
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Stream ``model.safetensors`` twice: first its sha256 and CRC (nothing kept), then, the
    bytes verified, its float32 tensors and stored dtypes, one tensor at a time."""
    cap, cap_name = limits.max_total_bytes, "max_total_bytes"
    member = archive.stream(WEIGHTS, limit=cap, limit_name=cap_name)
    try:
        member.skip()
        _check_digest(WEIGHTS, member.sha256(), files)
    finally:
        member.close()
    member = archive.stream(WEIGHTS, limit=cap, limit_name=cap_name, hashed=False)
    try:
        tensors, stored = read_safetensors(
            member, member=WEIGHTS, max_header_bytes=limits.max_safetensors_header_bytes
        )
        member.finish()
    finally:
        member.close()
    return tensors, stored


def _text(data: bytes, member: str) -> str:
    """Decode a text member as strict UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PackageError(
            f"{member}: expected UTF-8 text but byte {err.start} is not valid UTF-8"
        ) from err


def _compare_summary(
    field: str, stated: Mapping[str, Any], actual: Mapping[str, Any], source: str
) -> None:
    """Require a manifest summary object to equal what the members say."""
    for key in sorted(actual):
        if stated.get(key) != actual[key]:
            raise PackageError(
                f"{MANIFEST}: field '{field}.{key}' is {stated.get(key)!r} but {source} "
                f"gives {actual[key]!r}"
            )


def _attach_scales(
    manifest: Mapping[str, Any], tensors: dict[str, Tensor], stored: dict[str, str]
) -> None:
    """Join each quantised weight of an int8 package with its ``<name>_scale`` (in place):
    the scale must be stored F32 with one finite, non-negative value per row, and the
    int8 values must lie in [-127, 127]."""
    if QUANT_FIELD not in manifest:
        return
    for name in manifest[QUANT_FIELD]["tensors"]:
        scale = scale_name(name)
        if name not in tensors or scale not in tensors:
            raise PackageError(
                f"{WEIGHTS}: {MANIFEST} lists {name!r} as int8 but the member lacks "
                f"{name if name not in tensors else scale!r}"
            )
        if stored[name] != "I8" or stored[scale] != "F32":
            raise PackageError(
                f"{WEIGHTS}: tensor {name!r} is {stored[name]} with scale {stored[scale]}; "
                f"{MANIFEST} lists it as int8, expected I8 values and F32 scales"
            )
        raw = tensors[name]
        assert isinstance(raw.data, bytes)
        bad = first_out_of_range(raw.data)
        if bad >= 0:
            raise PackageError(
                f"{WEIGHTS}: tensor {name!r} holds -128 at flat index {bad}; the symmetric "
                "int8 scheme stores values in [-127, 127] only"
            )
        tensors[name] = Tensor(raw.shape, raw.data, "I8", scale=tensors.pop(scale))
        del stored[scale]


def _check_model(
    manifest: Mapping[str, Any],
    config: dict[str, Any],
    tensors: dict[str, Tensor],
    stored: Mapping[str, str],
) -> None:
    """Check config.json and the tensors against each other and the manifest."""
    dims = config_dims(config)
    dtype = manifest["model"]["dtype"]
    check_tensors(tensors, expected_tensor_shapes(config), where=WEIGHTS)
    quantised = set(manifest[QUANT_FIELD]["tensors"]) if QUANT_FIELD in manifest else set()
    floats = "F32" if dtype == "int8" else TORCH_TO_DTYPE[dtype]
    for name in sorted(stored):
        if name not in quantised and stored[name] != floats:
            raise PackageError(
                f"{WEIGHTS}: tensor {name!r} is {stored[name]} but the package dtype is "
                f"{dtype} ({floats}); expected one dtype for all unquantised tensors"
            )
    n_params = sum(tensor.numel for tensor in tensors.values())
    actual = model_summary(dims, n_params=n_params, dtype=dtype)
    _compare_summary("model", manifest["model"], actual, f"{CONFIG} and {WEIGHTS}")


def _check_dtype(manifest: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """Require config.json's ``torch_dtype`` and ``quantization_config`` to say what the
    manifest says (an int8 package: ``int8`` and the int8 scheme; a float one: no scheme)."""
    dtype = manifest["model"]["dtype"]
    if config.get("torch_dtype") != dtype:
        raise PackageError(
            f"{CONFIG}: field 'torch_dtype' is {config.get('torch_dtype')!r} but {MANIFEST} "
            f"model.dtype is {dtype!r}; expected them equal"
        )
    expected = quantization_config(manifest[QUANT_FIELD]) if QUANT_FIELD in manifest else None
    if config.get("quantization_config") != expected:
        raise PackageError(
            f"{CONFIG}: field 'quantization_config' is {config.get('quantization_config')!r} "
            f"but {MANIFEST} implies {expected!r}; expected them to agree"
        )


def _check_tokenizer(
    manifest: Mapping[str, Any], config: Mapping[str, Any], tokenizer_text: str
) -> None:
    """Check the tokenizer's vocabulary against config.json and the manifest."""
    tokenizer = loads_object(tokenizer_text, member=TOKENIZER)
    count = tokenizer_vocab_size(tokenizer)
    if count != config["vocab_size"]:
        raise PackageError(
            f"{TOKENIZER}: vocabulary has {count} tokens but {CONFIG} vocab_size (the "
            f"embedding rows) is {config['vocab_size']}; expected them equal"
        )
    _compare_summary("tokenizer", manifest["tokenizer"], tokenizer_summary(tokenizer), TOKENIZER)


def _verify(stream: BinaryIO, limits: PackageLimits) -> Package:
    """Run every check on the open package file and build the Package."""
    archive = SafeArchive(stream, limits)
    try:
        return _verify_archive(archive, stream, limits)
    finally:
        archive.close()


def _verify_archive(archive: SafeArchive, stream: BinaryIO, limits: PackageLimits) -> Package:
    """Check the manifest and members of an archive whose directory is already safe.

    Small members are read, hashed and parsed first; ``tokenizer.json`` is refused by its
    declared size and its value count before it is parsed; the weights are streamed last,
    one tensor at a time (see :func:`read_safetensors`).
    """
    raw_manifest = archive.read(
        MANIFEST, limit=limits.max_manifest_bytes, limit_name="max_manifest_bytes"
    )
    manifest = loads_object(raw_manifest, member=MANIFEST)
    validate_manifest(manifest)
    files = manifest["files"]
    _check_member_set(
        archive,
        files,
        HEAD_FIELD in manifest,
        AFFECT_FIELD in manifest,
        STATIC_FIELD in manifest,
    )
    config = loads_object(_read_member(archive, files, CONFIG, limits), member=CONFIG)
    generation = loads_object(
        _read_member(archive, files, GENERATION_CONFIG, limits), member=GENERATION_CONFIG
    )
    check_json_typed(generation, "generation_config")
    readme = _text(_read_member(archive, files, README, limits), README)
    dims = config_dims(config)
    _check_dtype(manifest, config)
    _check_tokenizer_cost(archive, dims.vocab_size)
    raw_tokenizer = _read_member(archive, files, TOKENIZER, limits)
    _check_tokenizer_values(raw_tokenizer, dims.vocab_size)
    tokenizer_text = _text(raw_tokenizer, TOKENIZER)
    del raw_tokenizer
    _check_tokenizer(manifest, config, tokenizer_text)
    head = None
    if HEAD_FIELD in manifest:
        head_tensors, _ = decode_safetensors(
            _read_member(archive, files, HEAD_MEMBER, limits),
            member=HEAD_MEMBER,
            max_header_bytes=limits.max_safetensors_header_bytes,
        )
        head = head_from_member(head_tensors, manifest[HEAD_FIELD], dims.d_model, dims.vocab_size)
    affect = None
    if AFFECT_FIELD in manifest:
        affect_tensors, _ = decode_safetensors(
            _read_member(archive, files, AFFECT_MEMBER, limits),
            member=AFFECT_MEMBER,
            max_header_bytes=limits.max_safetensors_header_bytes,
        )
        affect = affect_from_member(affect_tensors, manifest[AFFECT_FIELD], dims.d_model)
    static = None
    if STATIC_FIELD in manifest:
        static = static_from_member(
            _read_member(archive, files, STATIC_MEMBER, limits), manifest[STATIC_FIELD]
        )
    tensors, stored = _read_weights(archive, files, limits)
    _attach_scales(manifest, tensors, stored)
    _check_model(manifest, config, tensors, stored)
    return Package(
        manifest=manifest,
        config=config,
        tensors=dict(sorted(tensors.items())),
        tokenizer_json=tokenizer_text,
        generation_config=generation,
        readme=readme,
        digest=_file_digest(stream),
        embedder=head,
        affect=affect,
        static_embedder=static,
    )


def read_package(
    source: bytes | bytearray | memoryview | str | os.PathLike[str],
    *,
    limits: PackageLimits | None = None,
) -> Package:
    """Read, verify and load a `.evermind` package.

    Args:
        source: The package bytes, or a path to the file.
        limits: Resource limits; default :class:`PackageLimits` (2 GiB, 32 members...).

    Returns:
        The verified package, tensors upcast to float32.

    Raises:
        PackageError: The package is unreadable, corrupt, unsafe, over a limit, or
            inconsistent. No other exception escapes.
    """
    limits = limits or PackageLimits()
    try:
        with _open_source(source, limits) as stream:
            return _verify(stream, limits)
    except PackageError:
        raise
    except Exception as err:
        # The trust boundary: every specific failure above is wrapped with its own message;
        # this net keeps the one-exception contract should a crafted file find a gap.
        logger.warning("unexpected error while verifying a package", exc_info=True)
        raise PackageError(
            f"package: {type(err).__name__} ({err}) that no specific check caught; the file "
            "is corrupt or crafted"
        ) from err
