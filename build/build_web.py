"""Assembles the offline Studio bundle in ``dist/web`` from the source tree and pinned packages.

Inputs, and nothing else (no CDN, no download from anywhere but the package registries):
- the Pyodide core from the npm package ``pyodide`` (pinned in package-lock.json);
- micropip from PyPI (pinned by version and sha256; Pyodide's lock pins Pyodide's own
  build of it, so the lock we serve carries PyPI's hash instead);
- the pure-Python ``evermind`` wheel built from ``src/`` (it carries ``shaders/`` too);
- ``web/``, ``static/`` and ``shaders/``;
- DuckDB-wasm from the npm package ``@duckdb/duckdb-wasm`` for the Data panel's SQL box:
  its browser module bundled into one file with ``esbuild`` (both pinned in
  package-lock.json), plus the EH worker and wasm, under ``vendor/duckdb/``;
- PyScript from the npm package ``@pyscript/core`` (pinned in package-lock.json) under
  ``vendor/pyscript/``, and a PEP 503 index of our wheel under ``simple/``, so a page's
  ``<script type="py">`` imports evermind offline (``pyscript_bundle.py``).

Serving (see docs/studio.md, "Serving the bundle"): the large files that never change for a
given input (Pyodide, DuckDB, our wheel) sit in content-hash folders (``pyodide/<hash>/``,
``vendor/duckdb/<hash>/``, ``wheels/<hash>/``) named in ``build-info.json``, so a server
may cache them as immutable. Every compressible file gets a ``.gz`` (and a ``.br``: through
the ``brotli`` module when importable, else through Node's zlib, which ``npm ci`` already
needs) when that saves at least a tenth. ``python_stdlib.zip`` and the wheel are rewritten
with stored (uncompressed) entries first: zip's per-file deflate leaves the whole file nearly
incompressible, while one brotli stream over the stored zip is ~40% smaller. ``sw.js`` (the
service worker) gets the build id, the list of the bundle's files and the small "shell" it
installs up front.

The build is incremental: a digest of every input is kept in ``dist/web/.stamp`` and an
unchanged tree is not rebuilt. The new bundle is assembled beside the old one and swapped
in with a rename, so a failed build never leaves a half-written ``dist/web``.

Usage: ``python build/build_web.py [--force] [--check]`` (``--check`` exits 1 when stale).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from pyscript_bundle import (
    fill_examples,
    pyscript_inputs,
    pyscript_version,
    vendor_pyscript,
    write_simple_index,
)

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist" / "web"
CACHE = ROOT / "build" / ".cache"
PYODIDE_NPM = ROOT / "node_modules" / "pyodide"
PYODIDE_FILES = [
    "pyodide.mjs",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
]
MICROPIP_VERSION = "0.11.1"
MICROPIP_WHEEL = f"micropip-{MICROPIP_VERSION}-py3-none-any.whl"
MICROPIP_SHA256 = "768de165adb8e66906039d8fec4127a57f522dfdf8e6fbff877a4616941ecfd3"
DUCKDB_NPM = ROOT / "node_modules" / "@duckdb" / "duckdb-wasm"
DUCKDB_FILES = ["duckdb-browser-eh.worker.js", "duckdb-eh.wasm"]
ESBUILD = ROOT / "node_modules" / ".bin" / "esbuild"
# What the page needs from DuckDB; a narrow entry keeps the bundle small.
DUCKDB_ENTRY = 'export { AsyncDuckDB, VoidLogger, ConsoleLogger } from "@duckdb/duckdb-wasm";\n'
# Fixed wheel timestamps make the wheel (and so the bundle) reproducible.
SOURCE_DATE_EPOCH = "1767225600"  # 2026-01-01T00:00:00Z
#: Hex digits of a content-hash folder (the server's immutable rule matches this length).
HASH_LENGTH = 16
#: Suffixes worth a precompressed copy; the copy is kept only when it saves a tenth.
COMPRESSIBLE = {
    ".wasm",
    ".js",
    ".mjs",
    ".json",
    ".css",
    ".html",
    ".svg",
    ".wgsl",
    ".txt",
    ".zip",
    ".whl",
}
MIN_COMPRESS_BYTES = 1024
#: Brotli quality 11 takes ~5 s per MB here; files above this size get quality 9.
BROTLI_MAX_Q11_BYTES = 12_000_000
#: The line of web/sw.js that the build replaces with the bundle's file list.
SW_MANIFEST_MARKER = "const MANIFEST = null; // filled in by build/build_web.py"
#: What the worker fetches to boot (relative to the Pyodide folder), for the byte progress.
PYODIDE_BOOT = ["pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"]


class BuildError(Exception):
    """The bundle cannot be built; the message says what is missing and how to get it."""


def _inputs() -> list[Path]:
    files: list[Path] = []
    for folder, pattern in (
        ("src/evermind", "**/*"),  # code and the data files the wheel carries
        ("shaders", "*.wgsl"),
        ("web", "**/*"),
        ("static", "**/*"),
    ):
        files += sorted(
            p for p in (ROOT / folder).glob(pattern) if p.is_file() and "__pycache__" not in p.parts
        )
    files += [ROOT / "pyproject.toml", ROOT / "package-lock.json", Path(__file__).resolve()]
    files += [ROOT / "build" / "brotli.mjs", ROOT / "build" / "pyscript_bundle.py"]
    files += [PYODIDE_NPM / name for name in PYODIDE_FILES]
    files += _duckdb_inputs()
    files += pyscript_inputs(ROOT)
    return files


def _duckdb_inputs() -> list[Path]:
    modules = ROOT / "node_modules"
    return [
        DUCKDB_NPM / "package.json",
        DUCKDB_NPM / "dist" / "duckdb-browser.mjs",
        *(DUCKDB_NPM / "dist" / name for name in DUCKDB_FILES),
        modules / "apache-arrow" / "package.json",
        modules / "esbuild" / "package.json",
    ]


def input_digest() -> str:
    """sha256 over the relative path and content of every input file."""
    digest = hashlib.sha256()
    for path in _inputs():
        if not path.is_file():
            raise BuildError(f"missing build input {path.relative_to(ROOT)}; run `npm ci` first")
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def is_stale() -> bool:
    """True when dist/web is missing or was built from different inputs."""
    stamp = DIST / ".stamp"
    try:
        return not stamp.is_file() or stamp.read_text().strip() != input_digest()
    except BuildError:
        return True


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _micropip() -> Path:
    wheel = CACHE / "wheels" / MICROPIP_WHEEL
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--python-version",
            "3.14",
            "--only-binary=:all:",
            f"micropip=={MICROPIP_VERSION}",
            "-d",
            str(wheel.parent),
        ]
        if subprocess.run(cmd, check=False).returncode != 0 or not wheel.is_file():
            raise BuildError(f"could not download {MICROPIP_WHEEL} from PyPI ({' '.join(cmd)})")
    if _sha256(wheel) != MICROPIP_SHA256:
        raise BuildError(f"{wheel} has sha256 {_sha256(wheel)}, expected {MICROPIP_SHA256}")
    return wheel


def _evermind_wheel(out: Path) -> Path:
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
    cmd = [
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
        str(out),
        str(ROOT),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wheels = sorted(out.glob("evermind_memory-*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
        raise BuildError(f"building the evermind wheel failed:\n{result.stdout}\n{result.stderr}")
    return wheels[0]


# --- DuckDB-wasm (the Data panel's SQL over CSV) -------------------------------------------


def _duckdb_bundle() -> Path:
    """esbuild's one-file ESM build of DuckDB-wasm's browser module, cached by its inputs.

    DuckDB's module imports the bare specifiers ``apache-arrow``/``flatbuffers``/``tslib``;
    bundling resolves them once here instead of ~150 requests through an import map.
    """
    key = hashlib.sha256(DUCKDB_ENTRY.encode())
    for path in _duckdb_inputs():
        if path.suffix != ".wasm":
            key.update(hashlib.sha256(path.read_bytes()).digest())
    out = CACHE / "duckdb" / f"duckdb-{key.hexdigest()[:16]}.mjs"
    if out.is_file():
        return out
    if not ESBUILD.is_file():
        raise BuildError(f"missing {ESBUILD.relative_to(ROOT)}; run `npm ci` first")
    out.parent.mkdir(parents=True, exist_ok=True)
    entry = out.parent / "entry.mjs"  # inside the tree, so node_modules resolves from it
    entry.write_text(DUCKDB_ENTRY)
    partial = out.with_suffix(".tmp")
    cmd = [
        str(ESBUILD),
        str(entry),
        "--bundle",
        "--format=esm",
        "--platform=browser",
        "--minify",
        "--log-level=warning",
        f"--outfile={partial}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if result.returncode != 0 or not partial.is_file():
        raise BuildError(f"bundling DuckDB-wasm with esbuild failed:\n{result.stderr}")
    partial.rename(out)
    return out


def _duckdb(staging: Path) -> str:
    """Puts the DuckDB bundle, its EH worker and wasm under ``vendor/duckdb/<hash>/``."""
    target = staging / "vendor" / "duckdb" / "tmp"
    target.mkdir(parents=True)
    shutil.copy2(_duckdb_bundle(), target / "duckdb.mjs")
    for name in DUCKDB_FILES:
        source = DUCKDB_NPM / "dist" / name
        try:  # the wasm is 34 MB: a hard link saves the copy where the filesystem allows
            os.link(source, target / name)
        except OSError:
            shutil.copy2(source, target / name)
    return _hash_folder(target, staging)


def _pyscript(staging: Path, wheel: Path, pyodide_dir: str) -> tuple[str, str]:
    """Vendors PyScript under ``vendor/pyscript/<hash>/``, writes ``simple/`` for the wheel
    and fills the example pages' placeholders; returns (PyScript folder, project name)."""
    pyodide_version = json.loads((PYODIDE_NPM / "package.json").read_text())["version"]
    try:
        vendor_pyscript(ROOT, staging / "vendor" / "pyscript" / "tmp", pyodide_version)
        pyscript_dir = _hash_folder(staging / "vendor" / "pyscript" / "tmp", staging) + "/"
        project = write_simple_index(staging, wheel)
        fill_examples(staging, {"pyscript_dir": pyscript_dir, "pyodide_dir": pyodide_dir})
    except ValueError as err:
        raise BuildError(str(err)) from err
    return pyscript_dir, project


# --- serving: content-hash folders, stored zips, precompressed copies, the worker manifest --


def _hash_folder(folder: Path, staging: Path) -> str:
    """Renames ``folder`` to the hash of its files; returns the new path relative to staging."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    hashed = folder.with_name(digest.hexdigest()[:HASH_LENGTH])
    folder.rename(hashed)
    return hashed.relative_to(staging).as_posix()


#: Files of our wheel the tab never reads, left out of its copy (and of its RECORD): the base
#: embedder's table (8.4 MB; native ``--embedder base`` only, not yet used in the tab), which
#: would more than double the first visit.
TAB_LEAVES_OUT = frozenset({"evermind/embedder/data/base-embedder.safetensors"})


def _store_zip(source: Path, target: Path, leave_out: frozenset[str] = frozenset()) -> None:
    """Copies a zip with every entry stored (names, order and timestamps kept), without the
    entries ``leave_out`` names (and without their lines in a wheel's ``RECORD``)."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            if info.filename in leave_out:
                continue
            data = zin.read(info)
            if leave_out and info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode("utf-8").splitlines(keepends=True)
                kept = [line for line in lines if line.split(",", 1)[0] not in leave_out]
                data = "".join(kept).encode("utf-8")
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)


def _brotli_command() -> list[str] | None:
    node = shutil.which("node")
    return None if node is None else [node, str(ROOT / "build" / "brotli.mjs")]


def _compress(staging: Path) -> tuple[int, int]:
    """Writes ``.gz``/``.br`` beside each compressible file; returns (gz, br) counts.

    Outputs are cached in ``build/.cache/compressed/`` by the sha256 of the input, so an
    unchanged Pyodide or DuckDB is compressed once.
    """
    cache = CACHE / "compressed"
    cache.mkdir(parents=True, exist_ok=True)
    try:
        import brotli  # type: ignore[import-not-found]  # optional; pyproject should add it
    except ImportError:
        brotli = None
    node_brotli = _brotli_command() if brotli is None else None
    pending: list[tuple[Path, Path, int]] = []  # (input, cached output, quality) for Node
    files = sorted(
        p
        for p in staging.rglob("*")
        if p.is_file() and p.suffix in COMPRESSIBLE and p.stat().st_size >= MIN_COMPRESS_BYTES
    )
    counts = [0, 0]
    for path in files:
        data = path.read_bytes()
        key = hashlib.sha256(data).hexdigest()
        gz = cache / f"{key}.gz"
        if not gz.is_file():
            gz.write_bytes(gzip_bytes(data))
        br = cache / f"{key}.br"
        quality = 11 if len(data) <= BROTLI_MAX_Q11_BYTES else 9
        if not br.is_file() and brotli is not None:
            br.write_bytes(brotli.compress(data, quality=quality, lgwin=24))
        elif not br.is_file() and node_brotli is not None:
            pending.append((path, br, quality))
    if pending and node_brotli is not None:
        jobs = "\n".join(f"{q}\t{src}\t{dst}" for src, dst, q in pending)
        result = subprocess.run(
            node_brotli, input=jobs, text=True, capture_output=True, check=False
        )
        if result.returncode != 0:
            raise BuildError(f"brotli through Node failed:\n{result.stderr}")
    for path in files:
        size = path.stat().st_size
        key = hashlib.sha256(path.read_bytes()).hexdigest()
        for index, suffix in enumerate((".gz", ".br")):
            cached = cache / f"{key}{suffix}"
            if cached.is_file() and cached.stat().st_size <= 0.9 * size:
                shutil.copyfile(cached, path.with_name(path.name + suffix))
                counts[index] += 1
    return counts[0], counts[1]


def gzip_bytes(data: bytes) -> bytes:
    """gzip level 9 with a zero timestamp (the bundle stays reproducible)."""
    import gzip

    return gzip.compress(data, compresslevel=9, mtime=0)


def _service_worker(staging: Path, build_id: str) -> None:
    """Writes sw.js's manifest: the build id and every file a page of the bundle may fetch."""
    sw = staging / "sw.js"
    source = sw.read_text()
    if SW_MANIFEST_MARKER not in source:
        raise BuildError(f"web/sw.js lacks the line {SW_MANIFEST_MARKER!r}")
    files = sorted(
        str(p.relative_to(staging))
        for p in staging.rglob("*")
        if p.is_file()
        and p.suffix not in (".gz", ".br")
        and p.name != "sw.js"
        and not any(part.startswith(".") for part in p.relative_to(staging).parts)
    )
    # Installed up front: the small files a boot needs. DuckDB's loader, the examples and the
    # loose shaders are cached when first fetched; the content-hash folders likewise.
    shell = [
        f
        for f in files
        if not re.search(rf"(^|/)[0-9a-f]{{{HASH_LENGTH}}}/", f)
        and f != "duckdb.js"
        and not f.startswith(("examples/", "shaders/", "simple/"))
    ]
    manifest = {"build": build_id, "files": files, "shell": shell}
    sw.write_text(source.replace(SW_MANIFEST_MARKER, f"const MANIFEST = {json.dumps(manifest)};"))


def build(force: bool = False) -> bool:
    """Builds dist/web if stale (or ``force``); returns True when it built."""
    digest = input_digest()
    if not force and not is_stale():
        return False
    start = time.perf_counter()
    DIST.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".web-", dir=DIST.parent))
    try:
        # Pyodide core, with micropip from PyPI under the lock's file name and hash.
        pyodide = staging / "pyodide" / "tmp"
        pyodide.mkdir(parents=True)
        for name in PYODIDE_FILES[:-1]:
            if name == "python_stdlib.zip":
                _store_zip(PYODIDE_NPM / name, pyodide / name)
            else:
                shutil.copy2(PYODIDE_NPM / name, pyodide / name)
        lock = json.loads((PYODIDE_NPM / "pyodide-lock.json").read_text())
        shutil.copy2(_micropip(), pyodide / MICROPIP_WHEEL)
        lock["packages"]["micropip"]["file_name"] = MICROPIP_WHEEL
        lock["packages"]["micropip"]["sha256"] = MICROPIP_SHA256
        (pyodide / "pyodide-lock.json").write_text(json.dumps(lock))
        pyodide_dir = _hash_folder(pyodide, staging) + "/"
        # Our wheel, its entries stored (see the module docstring).
        built = Path(tempfile.mkdtemp(prefix=".wheel-", dir=DIST.parent))
        try:
            built_wheel = _evermind_wheel(built)
            (staging / "wheels" / "tmp").mkdir(parents=True)
            _store_zip(built_wheel, staging / "wheels" / "tmp" / built_wheel.name, TAB_LEAVES_OUT)
        finally:
            shutil.rmtree(built, ignore_errors=True)
        wheel_dir = _hash_folder(staging / "wheels" / "tmp", staging)
        wheel = staging / wheel_dir / built_wheel.name
        # Web files, static assets, shaders.
        shutil.copytree(ROOT / "web", staging, dirs_exist_ok=True)
        shutil.copytree(ROOT / "static", staging / "static")
        shutil.copytree(ROOT / "shaders", staging / "shaders")
        # DuckDB-wasm, loaded by the page only when the SQL box is used.
        duckdb_dir = _duckdb(staging) + "/"
        # PyScript and the index micropip installs our wheel from (the examples' PyScript page).
        pyscript_dir, project = _pyscript(staging, wheel, pyodide_dir)
        version = wheel.name.split("-")[1]
        wheel_path = f"{wheel_dir}/{wheel.name}"
        boot = [pyodide_dir + name for name in PYODIDE_BOOT] + [wheel_path]
        info = {
            "version": version,
            "wheel": wheel_path,
            "wheel_sha256": _sha256(wheel),
            "pyodide": json.loads((PYODIDE_NPM / "package.json").read_text())["version"],
            "pyodide_dir": pyodide_dir,
            "duckdb_dir": duckdb_dir,
            "pyscript": pyscript_version(ROOT),
            "pyscript_dir": pyscript_dir,
            "simple_index": "simple/",
            "project": project,
            # Decoded sizes, for byte progress: with Content-Encoding, Content-Length is the
            # compressed size while a stream reader counts decoded bytes.
            "boot_bytes": {path: (staging / path).stat().st_size for path in boot},
            "duckdb_wasm_bytes": (staging / duckdb_dir / "duckdb-eh.wasm").stat().st_size,
            "inputs_sha256": digest,
        }
        (staging / "build-info.json").write_text(json.dumps(info, indent=2) + "\n")
        _service_worker(staging, digest[:HASH_LENGTH])
        gz_count, br_count = _compress(staging)
        (staging / ".stamp").write_text(digest + "\n")
        # Swap in atomically: rename the old bundle away, the new one in, then delete the old.
        old = DIST.parent / f".old-{os.getpid()}"
        if DIST.exists():
            DIST.rename(old)
        staging.rename(DIST)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(p.stat().st_size for p in DIST.rglob("*") if p.is_file())
    print(
        f"built {DIST.relative_to(ROOT)}: {size / 1e6:.1f} MB "
        f"({gz_count} .gz, {br_count} .br) in {time.perf_counter() - start:.1f} s"
    )
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--check", action="store_true", help="exit 1 if the bundle is stale")
    args = parser.parse_args()
    try:
        if args.check:
            stale = is_stale()
            print("stale" if stale else "up to date")
            return 1 if stale else 0
        if not build(force=args.force):
            print(f"{DIST.relative_to(ROOT)} is up to date")
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
