"""A crash simulator: the states an OS crash can leave a data dir in, from a trace of the
storage code's file operations.

``CrashTracer`` wraps ``os.open``/``write``/``ftruncate``/``fsync``/``replace``/``unlink``
(and ``dup``/``close``, to know which file a descriptor is) while the storage code runs in
this process. Before each write, truncate, fsync, rename and unlink it records a crash point:
every file's current content and its durable content. The model of the file system:

- a file's data is durable as of its last successful fsync; an fsync that fails makes
  nothing durable, and a later fsync of the same file that succeeds is not trusted either
  (the kernel may have dropped the failed pages): the durable content stays what it was until
  the file is cut back to it; ``fail_fsync_at`` makes the n-th fsync of a segment fail (EIO);
- names (creation, rename, unlink) persist in program order, at once (the storage code
  fsyncs the directory right after each; a rename carries the durable content of its source,
  so a file renamed before its data was fsynced comes back empty or short);
- of the writes since the last fsync, an OS crash keeps any prefix, cut at any byte, or (a
  file system writing pages back out of order) keeps the size with some unsynced 4 KiB pages
  zeros; a file rewritten in place (not only appended to) comes back old or new.

``crash_states(point, rng)`` gives, for one crash point, the variants: everything unsynced
lost, everything kept, a random prefix per file, random lost pages per file;
``materialized_states(points, seed)`` writes each of them out in turn, for a recovery.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PAGE = 4096


@dataclass(frozen=True)
class CrashPoint:
    index: int  # the number of traced operations before it
    current: dict[str, bytes]  # relative path -> content
    durable: dict[str, bytes]  # relative path -> content known on the disk


class CrashTracer:
    """Records crash points while storage code runs against ``root``."""

    _WRAPPED = ("open", "write", "ftruncate", "fsync", "replace", "unlink", "dup", "close")

    def __init__(self, root: Path, *, fail_fsync_at: int | None = None) -> None:
        self.root = root.resolve()
        self.fail_fsync_at = fail_fsync_at
        self.segment_fsyncs = 0
        self.points: list[CrashPoint] = []
        self.operations = 0
        self._fds: dict[int, str] = {}
        self._durable: dict[str, bytes] = {}
        self._failed_fsync: set[str] = set()
        self._real = {name: getattr(os, name) for name in self._WRAPPED}

    # -- bookkeeping ---------------------------------------------------------------------------

    def _relative(self, path: str | os.PathLike[str]) -> str | None:
        absolute = Path(os.path.abspath(os.fspath(path)))
        try:
            return str(absolute.relative_to(self.root))
        except ValueError:
            return None

    def _files(self) -> dict[str, bytes]:
        out = {}
        for path in self.root.rglob("*"):
            if path.is_file():
                out[str(path.relative_to(self.root))] = path.read_bytes()
        return out

    def _point(self) -> None:
        self.points.append(CrashPoint(self.operations, self._files(), dict(self._durable)))
        self.operations += 1

    # -- the wrappers --------------------------------------------------------------------------

    def install(self, monkeypatch) -> None:
        real = self._real

        def open_(path, flags, mode=0o777, *, dir_fd=None):
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            relative = self._relative(path)
            if relative is not None and not os.path.isdir(path):
                self._fds[fd] = relative
            return fd

        def write(fd, data):
            if fd in self._fds:
                self._point()
            return real["write"](fd, data)

        def ftruncate(fd, length):
            relative = self._fds.get(fd)
            if relative is not None:
                self._point()
            result = real["ftruncate"](fd, length)
            if relative is not None:
                durable = self._durable.get(relative, b"")
                self._durable[relative] = durable[:length]
                if length <= len(durable):
                    # The pages a failed fsync left in doubt are cut off: trusted again.
                    self._failed_fsync.discard(relative)
            return result

        def fsync(fd):
            relative = self._fds.get(fd)
            if relative is None:
                return real["fsync"](fd)
            self._point()
            try:
                if relative.endswith(".log"):
                    self.segment_fsyncs += 1
                    if self.segment_fsyncs == self.fail_fsync_at:
                        raise OSError(errno.EIO, "Input/output error (injected)")
                result = real["fsync"](fd)
            except OSError:
                self._failed_fsync.add(relative)
                raise
            if relative not in self._failed_fsync:
                self._durable[relative] = (self.root / relative).read_bytes()
            return result

        def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
            source, target = self._relative(src), self._relative(dst)
            if source is not None:
                self._point()
            result = real["replace"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            if source is not None and target is not None:
                self._durable[target] = self._durable.pop(source, b"")
                for fd, name in self._fds.items():
                    if name == source:
                        self._fds[fd] = target
            return result

        def unlink(path, *, dir_fd=None):
            relative = self._relative(path)
            if relative is not None:
                self._point()
            result = real["unlink"](path, dir_fd=dir_fd)
            if relative is not None:
                self._durable.pop(relative, None)
            return result

        def dup(fd):
            new = real["dup"](fd)
            if fd in self._fds:
                self._fds[new] = self._fds[fd]
            return new

        def close(fd):
            self._fds.pop(fd, None)
            return real["close"](fd)

        for name, wrapper in (("open", open_), ("write", write), ("ftruncate", ftruncate),
                              ("fsync", fsync), ("replace", replace), ("unlink", unlink),
                              ("dup", dup), ("close", close)):
            monkeypatch.setattr(os, name, wrapper)


def _lost_pages(current: bytes, durable: bytes, rng: random.Random) -> bytes:
    data = bytearray(current)
    first_page = len(durable) // PAGE
    for page in range(first_page, (len(data) + PAGE - 1) // PAGE):
        if rng.random() < 0.5:
            start = max(page * PAGE, len(durable))
            data[start : (page + 1) * PAGE] = bytes(len(data[start : (page + 1) * PAGE]))
    return bytes(data)


def crash_states(point: CrashPoint, rng: random.Random) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(variant name, files) for each state the model allows at ``point`` (a sample)."""

    def each(choose) -> dict[str, bytes]:
        out = {}
        for path, current in point.current.items():
            durable = point.durable.get(path, b"")
            if current.startswith(durable):
                out[path] = choose(current, durable)
            else:  # rewritten in place since the last fsync: old or new
                out[path] = rng.choice([durable, current])
        return out

    yield "unsynced-lost", each(lambda current, durable: durable)
    yield "all-kept", each(lambda current, durable: current)
    yield "random-prefix", each(
        lambda current, durable: current[: rng.randint(len(durable), len(current))])
    yield "lost-pages", each(lambda current, durable: _lost_pages(current, durable, rng))


def materialize(files: dict[str, bytes], root: Path) -> None:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def materialized_states(points: Iterable[CrashPoint], *, seed: int
                        ) -> Iterator[tuple[CrashPoint, str, Path]]:
    """(crash point, its description, a directory holding the state) for every crash state of
    ``points``, in turn: the caller recovers from the directory before the next is asked
    for; each is removed after. Prints how many points and states there were."""
    rng = random.Random(seed)
    # The recoveries fsync: on a memory file system when there is one, for speed.
    shm = Path("/dev/shm")
    scratch = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None))
    points_seen = states = 0
    try:
        for point in points:
            points_seen += 1
            for variant, files in crash_states(point, rng):
                states += 1
                crashed = scratch / str(states)
                materialize(files, crashed)
                yield point, f"crash point {point.index}, {variant}", crashed
                shutil.rmtree(crashed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{points_seen} crash points, {states} crash states")
