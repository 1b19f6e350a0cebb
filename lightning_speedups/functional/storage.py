"""Where a dataset's files live, and how fast they read.

Card: tip T19 ``fast-storage``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

* **What it does.** :func:`storage_report` finds the mount that holds a data root (from
  ``/proc/mounts``), its file system type, whether it is a network file system (NFS, CIFS/SMB,
  Lustre, GPFS, Ceph, ...) or FUSE (s3fs, gcsfuse, sshfs, rclone, ...), whether the block device
  under it is rotational (``/sys/dev/block/<major>:<minor>/queue/rotational``), and measures the
  read rate of a sample of the files (dropping them from the page cache first where the kernel
  allows, so the figure is the disk's, not the RAM's). :func:`find_data_root` finds the root from
  a dataset's attributes (``root``, ``data_dir``, ``samples``, ``files``, ...).
* **Caveats.** The measurement reads up to ``max_bytes`` (64 MiB by default) once.

Examples:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.bin").write_bytes(b"x" * 4096)
    >>> r = storage_report(d)
    >>> r.files_read, r.bytes_read
    (1, 4096)
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_speedups.errors import MissingFileError, SettingError

__all__ = [
    "MountInfo",
    "StorageReport",
    "find_data_root",
    "find_mount",
    "is_rotational",
    "storage_report",
]

NETWORK_FS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "glusterfs", "ceph", "lustre", "gpfs",
        "beegfs", "orangefs", "pvfs2", "ocfs2", "gfs2", "davfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse",
        "fuse.rclone", "fuse.goofys", "fuse.blobfuse", "fuse.blobfuse2", "fuse.juicefs", "fuse.mountpoint-s3",
        "fuse.glusterfs", "fuse.cephfs", "fuse.ceph-fuse", "wekafs", "virtiofs",
    }
)  # fmt: skip
#: local FUSE types that are not a network hop
_LOCAL_FUSE = frozenset({"fuseblk", "fuse.lxcfs"})


@dataclass(frozen=True)
class MountInfo:
    """One line of ``/proc/mounts``."""

    device: str
    mount_point: str
    fs_type: str
    options: str


@dataclass
class StorageReport:
    """Where a data root lives and how fast a sample of its files reads."""

    path: str
    mount: MountInfo | None
    is_network: bool
    is_fuse: bool
    rotational: bool | None
    files_read: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    cache_dropped: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def read_mb_s(self) -> float | None:
        """Measured read rate in MB/s (10^6 bytes), ``None`` when nothing was read."""
        if self.bytes_read == 0 or self.seconds <= 0:
            return None
        return self.bytes_read / self.seconds / 1e6

    def summary(self) -> str:
        """One line: where, what kind of storage, the rate."""
        fs = self.mount.fs_type if self.mount else "unknown fs"
        kind = "network" if self.is_network else "FUSE" if self.is_fuse else "local"
        disk = {
            True: "rotational disk",
            False: "non-rotational disk",
            None: "disk type unknown",
        }[self.rotational]
        rate = f"{self.read_mb_s:.0f} MB/s over {self.files_read} files" if self.read_mb_s else "no files read"
        cache = "" if self.cache_dropped or not self.files_read else " (may include page cache)"
        where = self.mount.mount_point if self.mount else "?"
        return f"{self.path}: {kind} {fs} at {where}, {disk}, {rate}{cache}"


def _unescape(s: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _read_mounts(mounts_file: str | Path) -> list[MountInfo]:
    try:
        text = Path(mounts_file).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            out.append(MountInfo(_unescape(parts[0]), _unescape(parts[1]), parts[2], parts[3]))
    return out


def find_mount(path: str | Path, mounts_file: str | Path = "/proc/mounts") -> MountInfo | None:
    """The mount that holds ``path``: the longest mount point that is a prefix of its real path.

    Examples:
        >>> find_mount("/").mount_point
        '/'
    """
    real = os.path.realpath(str(path))
    best: MountInfo | None = None
    for m in _read_mounts(mounts_file):
        mp = m.mount_point.rstrip("/") or "/"
        inside = real == mp or mp == "/" or real.startswith(mp + "/")
        if inside and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best


def is_rotational(path: str | Path, sys_root: str | Path = "/sys") -> bool | None:
    """Whether the block device holding ``path`` is a spinning disk; ``None`` when unknown.

    Uses the device number of the file (``st_dev``) to find ``/sys/dev/block/MAJ:MIN``; for a
    partition, the parent disk's ``queue/rotational``. Overlay, tmpfs and network file systems
    have no block device and give ``None``.

    Examples:
        >>> is_rotational("/") in (True, False, None)
        True
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    node = Path(sys_root) / "dev" / "block" / f"{major}:{minor}"
    try:
        real = node.resolve(strict=True)
    except OSError:
        return None
    for d in (real, real.parent):
        f = d / "queue" / "rotational"
        try:
            return f.read_text().strip() == "1"
        except OSError:
            continue
    return None


_ROOT_ATTRS = (
    "root",
    "data_dir",
    "data_root",
    "root_dir",
    "path",
    "data_path",
    "directory",
    "folder",
)
_LIST_ATTRS = (
    "samples",
    "imgs",
    "files",
    "file_list",
    "paths",
    "filenames",
    "image_paths",
)


def find_data_root(dataset: Any, _depth: int = 0) -> Path | None:
    """A directory that holds the dataset's files, from its attributes, or ``None``.

    Looks at ``root`` / ``data_dir`` / ``path``-like attributes, then at lists of files
    (``samples``, ``imgs``, ``files``, ...), and follows ``Subset.dataset`` and
    ``ConcatDataset.datasets``.

    Examples:
        >>> class D: root = "/tmp"
        >>> str(find_data_root(D()))
        '/tmp'
    """
    if dataset is None or _depth > 4:
        return None
    for name in _ROOT_ATTRS:
        value = getattr(dataset, name, None)
        if isinstance(value, (str, os.PathLike)) and str(value) and os.path.exists(value):
            p = Path(value)
            return p if p.is_dir() else p.parent
    for name in _LIST_ATTRS:
        value = getattr(dataset, name, None)
        if isinstance(value, (list, tuple)) and value:
            first = value[0]
            if isinstance(first, (list, tuple)) and first:
                first = first[0]
            if isinstance(first, (str, os.PathLike)) and os.path.exists(first):
                return Path(first).parent
    inner = getattr(dataset, "dataset", None)
    if inner is not None and inner is not dataset:
        found = find_data_root(inner, _depth + 1)
        if found is not None:
            return found
    for inner in getattr(dataset, "datasets", None) or []:
        found = find_data_root(inner, _depth + 1)
        if found is not None:
            return found
    return None


def _sample_files(root: Path, sample_files: int, seed: int, scan_limit: int = 20000) -> list[Path]:
    if root.is_file():
        return [root]
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if not f.startswith("."):
                files.append(Path(dirpath) / f)
        if len(files) >= scan_limit:
            break
    rng = random.Random(seed)
    if len(files) > sample_files:
        files = rng.sample(files, sample_files)
    return files


def _drop_cache(fd: int) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False


def storage_report(
    root: str | Path,
    *,
    sample_files: int = 32,
    max_bytes: int = 64 * 2**20,
    drop_cache: bool = True,
    seed: int = 0,
    slow_mb_s: float = 100.0,
    mounts_file: str | Path = "/proc/mounts",
    clock: Callable[[], float] = time.perf_counter,
) -> StorageReport:
    """Report the storage under ``root`` and measure the read rate of up to ``sample_files`` files.

    Args:
        root: the data directory (or one file).
        sample_files: how many files to read, chosen at random (seeded) among the first 20000.
        max_bytes: stop reading after this many bytes in all.
        drop_cache: ask the kernel to drop each file from the page cache before reading it
            (``posix_fadvise(DONTNEED)``), so the rate is the storage's; files that are dirty or
            mapped elsewhere may stay cached.
        seed: the sample's seed.
        slow_mb_s: rates below this add a problem line.
        mounts_file: the mount table (for tests).
        clock: the seconds counter read around each file's reads (``time.perf_counter``; tests pass a fake).

    Returns:
        A :class:`StorageReport`; ``problems`` holds one line per thing worth fixing.
    """
    if sample_files < 0:
        raise SettingError(f"`sample_files` must be >= 0, got {sample_files}.")
    if max_bytes <= 0:
        raise SettingError(f"`max_bytes` must be > 0, got {max_bytes}.")
    path = Path(root)
    if not path.exists():
        raise MissingFileError(f"data root {str(path)!r} does not exist; pass the directory that holds the data.")
    mount = find_mount(path, mounts_file)
    fs = mount.fs_type if mount else ""
    is_fuse = fs.startswith("fuse") and fs not in _LOCAL_FUSE
    is_network = fs in NETWORK_FS or fs.split(".", 1)[0] in {"nfs", "cifs"}
    rot = is_rotational(path)
    report = StorageReport(
        path=str(path),
        mount=mount,
        is_network=is_network,
        is_fuse=is_fuse,
        rotational=rot,
    )

    _read_sample(report, _sample_files(path, sample_files, seed), max_bytes, drop_cache, clock)
    report.problems.extend(_problems(report, fs, slow_mb_s))
    return report


def _read_sample(
    report: StorageReport, files: list[Path], max_bytes: int, drop_cache: bool, clock: Callable[[], float]
) -> None:
    """Read ``files`` in 1 MiB chunks until ``max_bytes`` in all, timing the reads into ``report``."""
    dropped_all = True
    chunk = 1 << 20
    for f in files:
        if report.bytes_read >= max_bytes:
            break
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            if drop_cache:
                dropped_all &= _drop_cache(fd)
            t0 = clock()
            n = 0
            while report.bytes_read + n < max_bytes:
                data = os.read(fd, min(chunk, max_bytes - report.bytes_read - n))
                if not data:
                    break
                n += len(data)
            report.seconds += clock() - t0
            report.bytes_read += n
            report.files_read += 1
        finally:
            os.close(fd)
    report.cache_dropped = drop_cache and dropped_all and report.files_read > 0


def _problems(report: StorageReport, fs: str, slow_mb_s: float) -> list[str]:
    """One line per thing worth fixing: a network or FUSE file system, a rotational disk, a slow measured rate."""
    problems = []
    if report.is_network:
        problems.append(
            f"data on a network file system ({fs}): copy it to a local SSD (or node-local scratch) before training"
        )
    elif report.is_fuse:
        problems.append(f"data on a FUSE file system ({fs}): every read crosses user space; copy it locally")
    if report.rotational:
        problems.append("data on a rotational disk: random reads of small files are slow; move it to an SSD")
    rate = report.read_mb_s
    if rate is not None and rate < slow_mb_s and report.cache_dropped:
        problems.append(f"measured read rate {rate:.0f} MB/s is below {slow_mb_s:g} MB/s")
    return problems
