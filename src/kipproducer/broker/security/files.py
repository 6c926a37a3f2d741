"""The security files of a data dir: ``<data dir>/security/{users,acls}.json``.

Both are small JSON documents that two parties may change: the running broker (SaslAuthenticate
never writes, but CreateAcls / AlterUserScramCredentials do) and ``kip users`` / ``kip acls``
editing the data dir offline, possibly while the broker runs. Hence:

* every write goes to a temp file (mode 0600: the users file holds SCRAM keys), is fsynced and
  renamed over the old file, then the directory is fsynced: a crash leaves old or new, whole;
* read-modify-write cycles hold an exclusive flock on ``security/.lock``, so the broker and a
  CLI never lose each other's changes;
* readers notice a changed file by its (inode, mtime, size) and load it again; the rename
  always gives a new inode, so even two writes within one mtime tick are seen.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..storage.durable_files import fsync_dir
from .errors import StoreError

log = logging.getLogger("kipproducer.broker.security")

SECURITY_DIR = "security"
LOCK_FILE = ".lock"

T = TypeVar("T")


def security_dir(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / SECURITY_DIR


@contextlib.contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold the security directory's lock (across processes) for a read-modify-write."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def write_private_json(path: Path, document: Any) -> None:
    """Atomically replace ``path`` with ``document`` as JSON, readable by the owner only."""
    data = json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"
    fd, temp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp creates the file with mode 0600
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def read_json(path: Path) -> Any | None:
    """The JSON document at ``path``; None when there is no such file."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class WatchedJson(Generic[T]):
    """The parsed content of one JSON file, loaded again when the file changes.

    ``parse(document or None)`` turns the file's JSON (None: no file) into the value callers
    use; it raises StoreError (or KeyError / ValueError / TypeError) for a corrupt document.
    At the first load a corrupt file is an error (a broker must not start with ACLs it cannot
    read); later, a file that turned corrupt is logged and the last good value stays.
    """

    def __init__(self, path: Path, parse: Callable[[Any], T], *, check_every_s: float) -> None:
        self.path = path
        self._parse = parse
        self._check_every_s = check_every_s
        self._lock = threading.Lock()
        self._value: T | None = None
        self._signature: tuple[int, int, int] | None = None
        self._checked_at = float("-inf")

    def _load(self) -> T:
        signature = _signature(self.path)
        document = read_json(self.path)
        try:
            value = self._parse(document)
        except (KeyError, ValueError, TypeError) as exc:
            raise StoreError(f"{self.path} is corrupt: {exc!r}") from None
        self._value, self._signature = value, signature
        return value

    def get(self) -> T:
        """The current value; the file is looked at again at most every ``check_every_s``."""
        value = self._value
        now = time.monotonic()
        if value is not None and now - self._checked_at < self._check_every_s:
            return value
        with self._lock:
            self._checked_at = now
            if self._value is None:
                return self._load()
            if _signature(self.path) != self._signature:
                try:
                    self._load()
                    log.info("reloaded %s (changed on disk)", self.path)
                except StoreError as exc:
                    log.error("%s; keeping the previous content", exc)
            return self._value

    def update(self, change: Callable[[T], tuple[T, Any, Any]]) -> Any:
        """Read-modify-write under the cross-process lock.

        ``change(current)`` returns (new value, JSON document to write or None for no write,
        result); the result is returned.
        """
        with self._lock, exclusive(self.path.parent):
            current = self._load()  # the freshest content: another process may have written
            new_value, document, result = change(current)
            if document is not None:
                write_private_json(self.path, document)
                self._value, self._signature = new_value, _signature(self.path)
            return result
