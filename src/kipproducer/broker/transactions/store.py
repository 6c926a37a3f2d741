"""Durable transaction state: a compacted log keyed by transactional id.

Kafka keeps it in the internal topic ``__transaction_state``; here it is one PartitionLog in
``<data_dir>/__transactions/`` (no ``partition.metadata`` file, so the LogManager never takes
it for a topic). Each record: key = the transactional id (UTF-8), value = the metadata as JSON
(``TransactionMetadata.to_json``), or no value (a tombstone) once the id expired. The log is
compacted (``cleanup.policy=compact``) and every append is fsynced before ``write`` returns
(``flush.messages=1``), so a state the coordinator answered with survives kill -9. Opening
replays the log; the last record of each key wins.

Thread-safe (PartitionLog is): the coordinator writes from worker threads.
"""

from __future__ import annotations

import logging
import os
import time

from kipproducer.records import decode_batches, encode_batch

from ..storage.log_config import LogConfig
from ..storage.partition_log import PartitionLog
from .state import TransactionMetadata

log = logging.getLogger("kipproducer.broker.transactions")

DIRECTORY = "__transactions"
#: Kafka's transaction.state.log.segment.bytes default: small segments compact sooner.
SEGMENT_BYTES = 104_857_600
_READ_BYTES = 1 << 20


def store_config(segment_bytes: int = SEGMENT_BYTES) -> LogConfig:
    return LogConfig.of(cleanup_policy="compact", flush_messages=1, segment_bytes=segment_bytes)


class TransactionStore:
    """Open (and replay) the log in ``directory``; ``load()`` gives what it holds."""

    def __init__(self, directory: str | os.PathLike[str], *,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = os.fspath(directory)
        self._log = PartitionLog(self.directory, store_config(segment_bytes))

    def load(self) -> dict[str, TransactionMetadata]:
        """Every transactional id's latest stored state (tombstoned ids are absent)."""
        states: dict[str, TransactionMetadata] = {}
        offset = self._log.log_start_offset
        while offset < self._log.log_end_offset:
            result = self._log.read(offset, _READ_BYTES)
            if not result.records:
                break
            for batch in decode_batches(result.records, validate=True, strict=False):
                for record in batch:
                    if record.offset < offset or record.key is None:
                        continue
                    transactional_id = bytes(record.key).decode("utf-8", "replace")
                    if record.value is None:
                        states.pop(transactional_id, None)
                        continue
                    try:
                        states[transactional_id] = TransactionMetadata.from_json(
                            transactional_id, bytes(record.value))
                    except ValueError as exc:
                        # Only this version writes the log; an unreadable record is a bug or
                        # damage past the CRC. Keep going: the other ids are still good.
                        log.error("%s: offset %d: %s", self.directory, record.offset, exc)
            offset = result.next_offset
        return states

    def write(self, metadata: TransactionMetadata) -> None:
        """Store ``metadata`` durably (fsynced before returning)."""
        self._append(metadata.transactional_id, metadata.to_json())

    def remove(self, transactional_id: str) -> None:
        """Store a tombstone: the id is gone after the next replay."""
        self._append(transactional_id, None)

    def _append(self, transactional_id: str, value: bytes | None) -> None:
        batch = encode_batch([(transactional_id.encode(), value, None, int(time.time() * 1000))])
        self._log.append(bytearray(batch), assign_offsets=True)

    def compact(self) -> None:
        self._log.compact()

    def close(self) -> None:
        self._log.close()
