"""Small files that must survive a crash whole: written to a temp file, fsynced, renamed.

A reader after a crash sees either the old content or the new one, never a mix: rename is
atomic on POSIX, and the directory fsync makes the rename itself durable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kipproducer.crc32c import crc32c

TEMP_SUFFIX = ".tmp"
CHECKSUM_KEY = "crc32c"


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make creations, renames and deletions inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content."""
    path = Path(path)
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)


def write_json_atomically(path: str | os.PathLike[str], document: Any) -> None:
    write_atomically(path, json.dumps(document, indent=1, sort_keys=True).encode() + b"\n")


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_checked_json_atomically(path: str | os.PathLike[str], document: dict[str, Any]) -> None:
    """Like ``write_json_atomically``, with a CRC-32C of the content in the document, so a bit
    flipped on the disk is found by ``read_checked_json`` instead of trusted."""
    checked = {key: value for key, value in document.items() if key != CHECKSUM_KEY}
    checked[CHECKSUM_KEY] = crc32c(_canonical(checked))
    write_json_atomically(path, checked)


def read_checked_json(path: str | os.PathLike[str]) -> Any | None:
    """The document ``write_checked_json_atomically`` wrote, or None when the file does not
    exist; ValueError when it is not JSON or its checksum does not match (a document without
    one, written before checksums, is returned as it is)."""
    try:
        document = read_json(path)
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON, the file is damaged ({exc})") from None
    if isinstance(document, dict) and CHECKSUM_KEY in document:
        stored = document.pop(CHECKSUM_KEY)
        if stored != crc32c(_canonical(document)):
            raise ValueError(f"{path}: checksum mismatch, the file is damaged")
    return document


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """The JSON document at ``path``, or None when the file does not exist."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until every byte is written (a regular file may take a short write)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
