"""Durable storage of committed offsets and group metadata: an append-only log plus snapshots.

Layout of the coordinator's directory::

    groups-snapshot.json         full state as of the start of log segment N (atomically replaced)
    groups-<N>.log               records appended since that snapshot, one per line

A log line is ``<crc32 of the JSON, 8 hex digits> <JSON object>\\n``. Every append is fsynced
before the call returns, so an acknowledged OffsetCommit or SyncGroup survives a crash. A crash
can only tear the last line: recovery replays lines up to the first one that is incomplete (no
newline) or fails its CRC, and truncates the file there so later appends do not follow garbage.

Record types (``"type"``):

- ``group``: the group's metadata after a rebalance (replaces the previous one);
- ``offsets``: the offsets of one OffsetCommit (upserts);
- ``offsets_deleted``: offsets removed by retention;
- ``group_deleted``: tombstone of a deleted or expired group (metadata, offsets and pending
  transactional offsets);
- ``txn_offsets``: the offsets of one TxnOffsetCommit, pending for (group, producer id) until
  the transaction ends (merged into that producer's earlier pending offsets);
- ``txn_end``: the end of a producer's transaction for a group: its pending offsets become
  committed offsets (``"commit": true``) or are dropped (see ``txn_offsets.end_transaction``).

Every offset row carries a record sequence number (``record_seq``), increasing across the
store's life (the snapshot remembers the next one): a transaction's commit compares them, as
Kafka compares record offsets in ``__consumer_offsets``.

Compaction writes the whole state to a new snapshot that names the next segment, then removes
the old segment. The snapshot names its segment so a crash at any point leaves a consistent
pair: recovery replays only the segment the snapshot names and deletes any other.

The store keeps its own copy of the durable state (what replaying the files would give), so it
can compact without asking the coordinator. Not thread-safe: use from one thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import zlib
from pathlib import Path
from typing import Any

from .stored import (
    CommittedOffset,
    StoredGroup,
    StoredGroupMetadata,
    metadata_from_json,
    metadata_to_json,
    offsets_from_json,
    offsets_to_json,
    partitions_from_json,
    partitions_to_json,
    pending_from_json,
    pending_to_json,
)
from .txn_offsets import add_pending, end_transaction

logger = logging.getLogger("kipproducer.broker.groups")

SNAPSHOT_NAME = "groups-snapshot.json"
LOG_PREFIX = "groups-"
LOG_SUFFIX = ".log"
TEMP_SUFFIX = ".tmp"
FORMAT_VERSION = 1
DEFAULT_COMPACT_AFTER_BYTES = 8 * 1024 * 1024

TopicPartition = tuple[str, int]


class GroupStoreError(Exception):
    """The snapshot is unreadable (it is replaced atomically, so this is not a torn write)."""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def encode_record(record: dict[str, Any]) -> bytes:
    payload = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def decode_record(line: bytes) -> dict[str, Any] | None:
    """The record of one line (without its newline), or None when the line is damaged."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    try:
        expected_crc = int(line[:8], 16)
    except ValueError:
        return None
    payload = line[9:]
    if zlib.crc32(payload) != expected_crc:
        return None
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "type" in record else None


class GroupStore:
    """Append-only, fsynced log of group records with periodic compaction into a snapshot."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        compact_after_bytes: int = DEFAULT_COMPACT_AFTER_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self._fsync = fsync
        self._compact_after_bytes = compact_after_bytes
        self._state: dict[str, StoredGroup] = {}
        self._segment = 0
        # record_seq of the next offsets / txn_offsets record
        self._next_seq = 1
        self._fd: int | None = None
        self._log_bytes = 0
        # the log size at which to compact next (moved on by a failed compaction)
        self._compact_at = compact_after_bytes
        # a compaction renamed its snapshot into place but the directory fsync failed
        self._directory_unsynced = False

    # ----------------------------------------------------------------- opening and closing

    def open(self) -> dict[str, StoredGroup]:
        """Recover the state from disk and get ready to append. Returns a copy of the state."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob("*" + TEMP_SUFFIX):
            leftover.unlink()
        self._load_snapshot()
        replayed = self._replay_log()
        self._remove_other_segments()
        self._open_log_for_append()
        if replayed:
            # start with an empty log so a restart loop does not keep replaying the same records
            self._try_compact("at start; the next start replays the log again")
        return self.state_copy()

    def close(self) -> None:
        """Compact (so the next start reads one snapshot) and release the log file."""
        if self._fd is None:
            return
        try:
            if self._log_bytes:
                self._try_compact("on close; the next start replays the log")
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    @property
    def log_path(self) -> Path:
        return self._segment_path(self._segment)

    def knows_group(self, group_id: str) -> bool:
        """Whether anything durable exists for the group (so deleting it needs a tombstone)."""
        return group_id in self._state

    def state_copy(self) -> dict[str, StoredGroup]:
        return {
            group_id: StoredGroup(stored.metadata, dict(stored.offsets), dict(stored.pending))
            for group_id, stored in self._state.items()
        }

    # ------------------------------------------------------------------------- appends

    def append_group_metadata(self, metadata: StoredGroupMetadata) -> None:
        self._append(
            {"type": "group", "group_id": metadata.group_id, "metadata": metadata_to_json(metadata)}
        )

    def append_offsets(
        self, group_id: str, offsets: dict[TopicPartition, CommittedOffset]
    ) -> dict[TopicPartition, CommittedOffset]:
        """Store committed offsets; returns them with their ``record_seq`` filled in."""
        stamped = self._stamp(offsets)
        self._append({"type": "offsets", "group_id": group_id, "offsets": offsets_to_json(stamped)})
        return stamped

    def append_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, CommittedOffset]:
        """Store a TxnOffsetCommit's offsets as pending; returns them with ``record_seq``."""
        stamped = self._stamp(offsets)
        self._append(
            {
                "type": "txn_offsets",
                "group_id": group_id,
                "producer_id": producer_id,
                "producer_epoch": producer_epoch,
                "offsets": offsets_to_json(stamped),
            }
        )
        return stamped

    def append_txn_end(
        self, group_id: str, producer_id: int, producer_epoch: int, *, commit: bool
    ) -> None:
        self._append(
            {
                "type": "txn_end",
                "group_id": group_id,
                "producer_id": producer_id,
                "producer_epoch": producer_epoch,
                "commit": commit,
            }
        )

    def _stamp(
        self, offsets: dict[TopicPartition, CommittedOffset]
    ) -> dict[TopicPartition, CommittedOffset]:
        # _apply advances _next_seq once the record is durable; a failed write reuses the number
        seq = self._next_seq
        return {tp: dataclasses.replace(o, record_seq=seq) for tp, o in offsets.items()}

    def append_offsets_deleted(self, group_id: str, partitions: list[TopicPartition]) -> None:
        self._append(
            {
                "type": "offsets_deleted",
                "group_id": group_id,
                "partitions": partitions_to_json(partitions),
            }
        )

    def append_group_deleted(self, group_id: str) -> None:
        self._append({"type": "group_deleted", "group_id": group_id})

    def _append(self, record: dict[str, Any]) -> None:
        """Write and fsync one record, then apply it to the in-memory copy.

        Raises OSError when the write fails; the log is then cut back to its previous end so a
        partial record cannot sit in front of later ones.
        """
        if self._fd is None:
            raise OSError("the group store is not open")
        if self._directory_unsynced:
            # a compaction switched to this segment but could not make the switch durable:
            # no record in it is acknowledged before the switch is (see ``compact``)
            self._sync_directory()
        data = encode_record(record)
        try:
            _write_all(self._fd, data)
            if self._fsync:
                os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, self._log_bytes)
            except OSError:
                logger.exception("could not cut a failed append off the group log")
            raise
        self._log_bytes += len(data)
        self._apply(record)
        if self._log_bytes >= self._compact_at:
            self._try_compact(f"retried after {self._compact_after_bytes} more bytes of log")

    def _apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        group_id = record["group_id"]
        if kind == "group":
            self._state.setdefault(group_id, StoredGroup()).metadata = metadata_from_json(
                record["metadata"]
            )
        elif kind == "offsets":
            stored = self._state.setdefault(group_id, StoredGroup())
            offsets = offsets_from_json(record["offsets"])
            self._note_seqs(offsets)
            stored.offsets.update(offsets)
        elif kind == "txn_offsets":
            offsets = offsets_from_json(record["offsets"])
            producer_id, producer_epoch = int(record["producer_id"]), int(record["producer_epoch"])
            self._note_seqs(offsets)
            stored = self._state.setdefault(group_id, StoredGroup())
            add_pending(stored.pending, producer_id, producer_epoch, offsets)
        elif kind == "txn_end":
            producer_id, producer_epoch = int(record["producer_id"]), int(record["producer_epoch"])
            commit = bool(record["commit"])
            stored = self._state.get(group_id)
            if stored is not None:
                end_transaction(stored.offsets, stored.pending, producer_id, producer_epoch, commit)
        elif kind == "offsets_deleted":
            stored = self._state.get(group_id)
            if stored is not None:
                for tp in partitions_from_json(record["partitions"]):
                    stored.offsets.pop(tp, None)
        elif kind == "group_deleted":
            self._state.pop(group_id, None)
        else:
            raise ValueError(f"unknown group record type {kind!r}")

    def _note_seqs(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        for o in offsets.values():
            self._next_seq = max(self._next_seq, o.record_seq + 1)

    # ---------------------------------------------------------------------- compaction

    def _try_compact(self, then: str) -> None:
        """Compact; a failure is one log line (the state stays consistent, see ``compact``)
        and the next attempt waits until the log has grown by another compaction's worth."""
        try:
            self.compact()
        except OSError as exc:
            self._compact_at = self._log_bytes + self._compact_after_bytes
            logger.error("group log compaction failed (%s); %s", exc, then)

    def compact(self) -> None:
        """Snapshot the whole state, start a new empty segment, drop the old one.

        Until the new snapshot is renamed into place a failure undoes the new files and leaves
        the old segment the log. From the rename on the snapshot names the new segment, so the
        store switches to it whatever fails next (appending to the old one would put records
        where the next start does not read them). If the directory cannot be fsynced after the
        rename, the old segment is kept and every append first retries that fsync: a record of
        the new segment is only acknowledged once a crash cannot bring back the old snapshot.
        Raises OSError when any step failed.
        """
        old_fd, old_path = self._fd, self.log_path
        new_segment = self._segment + 1
        new_path = self._segment_path(new_segment)
        new_fd = os.open(new_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            if self._fsync:
                os.fsync(new_fd)
                _fsync_dir(self.directory)
            self._write_snapshot(new_segment)
        except BaseException:
            os.close(new_fd)
            with contextlib.suppress(OSError):  # (a leftover is removed by the next open)
                new_path.unlink(missing_ok=True)
            raise
        # the snapshot naming the new segment is in place: from here on the old one is garbage
        self._fd, self._segment, self._log_bytes = new_fd, new_segment, 0
        self._compact_at = self._compact_after_bytes
        if old_fd is not None:
            os.close(old_fd)
        self._directory_unsynced = True
        self._sync_directory()
        old_path.unlink(missing_ok=True)
        if self._fsync:
            _fsync_dir(self.directory)  # (if lost, the next open removes the old segment)

    def _sync_directory(self) -> None:
        """Make the last snapshot rename durable (raises OSError while it cannot be)."""
        if self._fsync:
            _fsync_dir(self.directory)
        self._directory_unsynced = False

    def _write_snapshot(self, segment: int) -> None:
        document = {
            "format": FORMAT_VERSION,
            "segment": segment,
            "next_seq": self._next_seq,
            "groups": [
                {
                    "group_id": group_id,
                    "metadata": None
                    if stored.metadata is None
                    else metadata_to_json(stored.metadata),
                    "offsets": offsets_to_json(stored.offsets),
                    "pending": pending_to_json(stored.pending),
                }
                for group_id, stored in self._state.items()
            ],
        }
        data = json.dumps(document, separators=(",", ":")).encode()
        path = self.directory / SNAPSHOT_NAME
        temp = path.with_name(path.name + TEMP_SUFFIX)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                _write_all(fd, data)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # (a leftover is removed by the next open)
                temp.unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------------ recovery

    def _segment_path(self, segment: int) -> Path:
        return self.directory / f"{LOG_PREFIX}{segment:020d}{LOG_SUFFIX}"

    def _load_snapshot(self) -> None:
        path = self.directory / SNAPSHOT_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            self._state, self._segment, self._next_seq = {}, 0, 1
            return
        try:
            document = json.loads(raw)
            if document.get("format") != FORMAT_VERSION:
                raise GroupStoreError(f"{path}: unsupported format {document.get('format')!r}")
            self._segment = int(document["segment"])
            # (snapshots written before transactions lack "next_seq" and "pending")
            self._next_seq = int(document.get("next_seq", 1))
            self._state = {
                entry["group_id"]: StoredGroup(
                    None if entry["metadata"] is None else metadata_from_json(entry["metadata"]),
                    offsets_from_json(entry["offsets"]),
                    pending_from_json(entry.get("pending", [])),
                )
                for entry in document["groups"]
            }
            for stored in self._state.values():
                self._note_seqs(stored.offsets)
                for entry in stored.pending.values():
                    self._note_seqs(entry.offsets)
        except (ValueError, KeyError, TypeError) as exc:
            raise GroupStoreError(f"{path} is unreadable: {exc}") from exc

    def _replay_log(self) -> int:
        """Apply the snapshot's segment; cut a torn or damaged tail. Returns records applied."""
        path = self.log_path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return 0
        position = applied = 0
        while position < len(data):
            end = data.find(b"\n", position)
            record = None if end < 0 else decode_record(data[position:end])
            if record is None:
                break
            try:
                self._apply(record)
            except (ValueError, KeyError, TypeError):
                # a record with a valid CRC but an unknown shape: written by a newer version?
                logger.error("%s: unreadable record at byte %d; ignoring the rest", path, position)
                break
            applied += 1
            position = end + 1
        if position < len(data):
            logger.warning(
                "%s: dropping %d bytes of torn or damaged records at byte %d (crash mid-write?)",
                path,
                len(data) - position,
                position,
            )
            with open(path, "r+b") as f:
                f.truncate(position)
                if self._fsync:
                    os.fsync(f.fileno())
        return applied

    def _remove_other_segments(self) -> None:
        current = self.log_path.name
        for path in self.directory.glob(f"{LOG_PREFIX}*{LOG_SUFFIX}"):
            if path.name != current:
                logger.info("removing stale group log segment %s", path)
                path.unlink()

    def _open_log_for_append(self) -> None:
        path = self.log_path
        existed = path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._log_bytes = os.fstat(self._fd).st_size
        if not existed and self._fsync:
            _fsync_dir(self.directory)
