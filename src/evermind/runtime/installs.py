"""Installed packages on disk: atomic install, start-up scan, delete (native-only).

Layout under the data directory::

    models/<tenant>/<name>/<version>/package.evermind   the verified package, as pushed
    models/<tenant>/<name>/<version>/install.json       digest, size, install time, manifest
    tmp/                                                uploads and staged installs

An install is staged as a complete directory under ``tmp/`` (both files written and
fsynced) and then moved into place with one ``rename(2)``, which is atomic: a crash leaves
either the whole version directory or none of it. ``tmp/`` is emptied at start-up, so an
interrupted upload or install leaves nothing behind. A delete renames the directory out
into ``tmp/`` first, so a crash mid-delete cannot leave half a package visible.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evermind.errors import Conflict, StorageError
from evermind.package import Package

logger = logging.getLogger(__name__)

PACKAGE_FILE = "package.evermind"
INSTALL_FILE = "install.json"


@dataclass(frozen=True)
class Install:
    """One installed package version of one tenant.

    Attributes:
        tenant: The owner; only its tokens can see or use the install.
        name: The package name.
        version: The package version.
        digest: ``"sha256:<hex>"`` of the package file.
        size: Package size in bytes.
        installed_at: Seconds since the epoch.
        manifest: The package's ``manifest.json``.
        path: The package file.
    """

    tenant: str
    name: str
    version: str
    digest: str
    size: int
    installed_at: float
    manifest: dict[str, Any]
    path: Path

    @property
    def ref(self) -> str:
        """The served id: ``evermind/<name>:<version>``."""
        return f"evermind/{self.name}:{self.version}"

    @property
    def key(self) -> tuple[str, str, str]:
        """``(tenant, name, version)``."""
        return (self.tenant, self.name, self.version)


class InstallConflict(Conflict):
    """The ref is installed with another digest.

    Attributes:
        existing: The install that holds the ref.
        digest: The digest of the package that was refused.
    """

    code = "ref_conflict"

    def __init__(self, existing: Install, digest: str) -> None:
        super().__init__(
            f"{existing.ref} is already installed with digest {existing.digest}, this package "
            f"has {digest}; hint: bump the version, or DELETE the installed one first"
        )
        self.existing = existing
        self.digest = digest

    def __reduce__(self) -> tuple[type[InstallConflict], tuple[Install, str]]:
        return (type(self), (self.existing, self.digest))


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of versions: parts split at ``. + _ -``, numbers compared numerically.

    ``1.10`` is newer than ``1.9``; a number part is newer than a text part at the same
    position; when the shared parts tie the longer version is newer (so ``1.0.0-rc1``
    sorts after ``1.0.0`` — prefer plain numeric versions). See docs/runtime.md.
    """
    parts = re.split(r"[.+_-]", version)
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in parts)


class InstallStore:
    """The packages under ``models/`` and the in-memory index of them.

    Args:
        models_dir: ``<data>/models``.
        tmp_dir: ``<data>/tmp``, on the same filesystem (renames must be atomic).
    """

    def __init__(self, models_dir: Path, tmp_dir: Path) -> None:
        self.models_dir = models_dir
        self.tmp_dir = tmp_dir
        self._lock = threading.Lock()
        self._index: dict[tuple[str, str, str], Install] = {}
        models_dir.mkdir(parents=True, exist_ok=True)
        self._clear_tmp()
        self._scan()

    # ------------------------------------------------------------------ start-up

    def _clear_tmp(self) -> None:
        if self.tmp_dir.exists():
            leftovers = list(self.tmp_dir.iterdir())
            if leftovers:
                logger.info("removing %d interrupted upload(s)/install(s)", len(leftovers))
            for entry in leftovers:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def _scan(self) -> None:
        for version_dir in sorted(self.models_dir.glob("*/*/*")):
            if not version_dir.is_dir():
                continue
            try:
                install = _read_install(version_dir)
            except (OSError, ValueError, KeyError) as err:
                # Cannot come from our own atomic installs; kept aside, not served, not deleted.
                logger.warning("ignoring %s: not a complete install (%s)", version_dir, err)
                continue
            self._index[install.key] = install
        logger.info("found %d installed package(s) in %s", len(self._index), self.models_dir)

    # ------------------------------------------------------------------ queries

    def list(self, tenant: str) -> list[Install]:
        """Every install of ``tenant``, by name then newest version first."""
        with self._lock:
            mine = [i for i in self._index.values() if i.tenant == tenant]
        newest_first = sorted(
            mine, key=lambda i: (version_key(i.version), i.installed_at), reverse=True
        )
        return sorted(newest_first, key=lambda i: i.name)  # stable: versions stay newest first

    def get(self, tenant: str, name: str, version: str) -> Install | None:
        """The install of ``name:version`` owned by ``tenant``, or None."""
        with self._lock:
            return self._index.get((tenant, name, version))

    def newest(self, tenant: str, name: str) -> Install | None:
        """The highest version of ``name`` owned by ``tenant`` (ties: latest installed)."""
        with self._lock:
            mine = [i for i in self._index.values() if i.tenant == tenant and i.name == name]
        if not mine:
            return None
        return max(mine, key=lambda i: (version_key(i.version), i.installed_at))

    # ------------------------------------------------------------------ writes

    def new_upload_path(self) -> Path:
        """A fresh file name under ``tmp/`` for an upload in progress."""
        return self.tmp_dir / f"upload-{uuid.uuid4().hex}.part"

    def install(self, tenant: str, upload: Path, package: Package) -> tuple[Install, bool]:
        """Moves a verified upload into place as ``tenant``'s ``name:version``.

        Args:
            tenant: The owner.
            upload: The uploaded file under ``tmp/`` (consumed: moved or deleted).
            package: ``upload`` as verified by the package reader.

        Returns:
            ``(install, created)``; ``created`` is False when the same digest was already
            installed under that ref (the push is idempotent).

        Raises:
            InstallConflict: The ref is installed with another digest.
            StorageError: The filesystem refused (disk full, permissions).
        """
        key = (tenant, package.name, package.version)
        existing = self.get(tenant, package.name, package.version)
        if existing is not None:
            upload.unlink(missing_ok=True)
            if existing.digest == package.digest:
                return existing, False
            raise InstallConflict(existing, package.digest)
        final = self.models_dir / tenant / package.name / package.version
        stage = self.tmp_dir / f"stage-{uuid.uuid4().hex}"
        try:
            # Staging (copying, fsync) runs without the lock: readers on the event loop
            # must never wait for the disk.
            install = self._stage(stage, tenant, upload, package, final)
            with self._lock:
                existing = self._index.get(key)  # a concurrent push of the same ref won
                if existing is None:
                    final.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(stage, final)
                    self._index[key] = install
            if existing is not None:
                shutil.rmtree(stage, ignore_errors=True)
                if existing.digest == package.digest:
                    return existing, False
                raise InstallConflict(existing, package.digest)
            _fsync_dir(final.parent)
        except OSError as err:
            shutil.rmtree(stage, ignore_errors=True)
            upload.unlink(missing_ok=True)
            raise StorageError(
                f"installing {package.name}:{package.version} failed: {err}; "
                "hint: check free disk space and permissions of the data directory"
            ) from err
        logger.info("installed %s for tenant %s (%s)", install.ref, tenant, install.digest)
        return install, True

    def _stage(
        self, stage: Path, tenant: str, upload: Path, package: Package, final: Path
    ) -> Install:
        stage.mkdir()
        os.replace(upload, stage / PACKAGE_FILE)
        size = (stage / PACKAGE_FILE).stat().st_size
        record = {
            "tenant": tenant,
            "name": package.name,
            "version": package.version,
            "digest": package.digest,
            "size": size,
            "installed_at": time.time(),
            "manifest": package.manifest,
        }
        with open(stage / INSTALL_FILE, "w", encoding="utf-8") as stream:
            json.dump(record, stream, indent=1, sort_keys=True)
            stream.flush()
            os.fsync(stream.fileno())
        with open(stage / PACKAGE_FILE, "rb") as stream:
            os.fsync(stream.fileno())
        _fsync_dir(stage)
        return _install_from(record, final / PACKAGE_FILE)

    def delete(self, tenant: str, name: str, version: str) -> Install | None:
        """Removes ``tenant``'s ``name:version``; returns it, or None when absent."""
        with self._lock:
            install = self._index.pop((tenant, name, version), None)
            if install is None:
                return None
            doomed = self.tmp_dir / f"deleted-{uuid.uuid4().hex}"
            try:
                os.rename(install.path.parent, doomed)
            except OSError as err:
                self._index[install.key] = install
                raise StorageError(f"deleting {install.ref} failed: {err}") from err
        shutil.rmtree(doomed, ignore_errors=True)
        for empty in (install.path.parent.parent, install.path.parent.parent.parent):
            try:
                empty.rmdir()  # only succeeds when nothing else is left in it
            except OSError:
                break
        logger.info("deleted %s of tenant %s", install.ref, tenant)
        return install


def _read_install(version_dir: Path) -> Install:
    record = json.loads((version_dir / INSTALL_FILE).read_text(encoding="utf-8"))
    package = version_dir / PACKAGE_FILE
    if not package.is_file():
        raise ValueError(f"{PACKAGE_FILE} missing")
    return _install_from(record, package)


def _install_from(record: dict[str, Any], package: Path) -> Install:
    return Install(
        tenant=str(record["tenant"]),
        name=str(record["name"]),
        version=str(record["version"]),
        digest=str(record["digest"]),
        size=int(record["size"]),
        installed_at=float(record["installed_at"]),
        manifest=dict(record["manifest"]),
        path=package,
    )


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return  # directories cannot be opened for fsync on Windows
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
