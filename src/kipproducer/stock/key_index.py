"""The emulated writer's key index for per-key conditions on a stock cluster
(docs/per-key-conditional.md, "Emulated mode"): key -> offset of its last committed live
record in one partition, built by reading the partition at read_committed with the project's
own Fetch reader (mirror/fetcher.py: aborted batches and markers dropped there, records
decoded in C by ``ArrowRows``), and brought up to date the same way before each conditional
append.

The answers follow the native ones (broker/storage/key_index.py): a tombstone makes the key
absent, aborted and control records never count, compaction never changes an answer (it
keeps every key's last record and drops a tombstone, which answers the same).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException

from .._arrow_rows import ArrowRows
from ..errors import KEY_ABSENT, KeyConditionKafkaError
from ..protocol import error_codes as ec

#: Records folded into the index at a time (the decoded columns are bounded by it).
FOLD_ROWS = 65_536


@dataclass(slots=True)
class PartitionKeys:
    """One partition's index: ``last[key]`` is the offset of the key's last committed live
    record below ``covered`` (keys absent there are not in it)."""

    covered: int = 0
    last: dict[bytes, int] = field(default_factory=dict)

    def answer(self, key: bytes) -> int:
        return self.last.get(key, KEY_ABSENT)

    def record(self, key: Any, offset: int, tombstone: bool) -> None:
        if key is None:
            return
        key = key_bytes(key)
        if tombstone:
            self.last.pop(key, None)
        else:
            self.last[key] = offset


def key_bytes(key: Any) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def _valid(validity: Any, n: int) -> list[bool] | None:
    """An Arrow validity bitmap as n booleans (None: every entry is valid)."""
    if not validity:
        return None
    bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[:n]
    return bits.astype(bool).tolist()


def fold(done: Mapping[str, Any], index: PartitionKeys) -> None:
    """Fold ArrowRows.finish()'s columns (records in offset order) into ``index``."""
    n = done["rows"]
    if not n:
        return
    offsets = np.frombuffer(done["offset"], np.int64).tolist()
    key_validity, key_offsets, key_data, _ = done["key"]
    keys_ok = _valid(key_validity, n)
    values_ok = _valid(done["value"][0], n)
    bounds = np.frombuffer(key_offsets, np.int32).tolist()
    data = bytes(key_data)
    last = index.last
    for i in range(n):
        if keys_ok is not None and not keys_ok[i]:
            continue  # a null key has no answer to keep
        key = data[bounds[i]:bounds[i + 1]]
        if values_ok is not None and not values_ok[i]:
            last.pop(key, None)  # a tombstone: absent
        else:
            last[key] = offsets[i]


def read_committed_keys(connection: Mapping[str, Any], topic: str, partition: int,
                        index: PartitionKeys, end: int, timeout_s: float) -> None:
    """Fold the committed records of [index.covered, end) into the index; ``end`` is at or
    below the partition's last stable offset (every transaction below it decided)."""
    if end <= index.covered:
        return
    # (imported here: the mirror package imports the Producer, which imports this module)
    from ..mirror.fetcher import FetchReader
    from ..mirror.topics import MirrorError

    try:
        reader = FetchReader(connection, "read_committed", timeout=timeout_s)
    except MirrorError as exc:
        raise KafkaException(KafkaError(
            KafkaError._UNSUPPORTED_FEATURE,
            f"expected_key_offset= (emulated): the key index is read with the project's "
            f"Fetch client, which cannot connect with this configuration: {exc}")) from None
    rows = ArrowRows(False)
    where = (topic, partition)
    deadline = time.monotonic() + timeout_s
    try:
        reader.assign({where: index.covered})
        position = index.covered
        while position < end:
            try:
                answers = reader.poll(0.2)
            except MirrorError as exc:
                raise KafkaException(KafkaError(
                    KafkaError._TRANSPORT,
                    f"reading {topic}[{partition}] for its key index: {exc}")) from None
            if not answers and time.monotonic() > deadline:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT,
                    f"reading {topic}[{partition}] for its key index: stuck at offset "
                    f"{position} of {end} for {timeout_s:.0f} s"))
            for answer in answers:
                for batch in answer.batches:
                    if batch.framed:
                        rows.add_framed(batch.records, batch.min_offset, end)
                    else:
                        rows.add_records(batch.records, batch.count, batch.base_offset,
                                         batch.base_timestamp, batch.log_append_time,
                                         batch.max_timestamp, batch.min_offset, end)
                    if rows.rows >= FOLD_ROWS:
                        fold(rows.finish(), index)
                # (an answer at the stable end with nothing after it: compacted or deleted
                # offsets up to ``end``)
                position = end if answer.at_end else max(position, answer.next_offset)
        fold(rows.finish(), index)
    finally:
        reader.close()
    index.covered = end


def conflicts(index: PartitionKeys, checks: list[tuple[int, bytes, int]],
              log_start: int = 0) -> dict[int, int]:
    """record index -> the key's actual last offset, for every condition that fails (a last
    record below ``log_start``, deleted by retention, is absent)."""
    wrong = {}
    for i, key, expected in checks:
        actual = index.answer(key)
        if actual < log_start:
            actual = KEY_ABSENT
        if actual != expected:
            wrong[i] = actual
    return wrong


def record_errors(topic: str, partition: int, keys: list, expected: list,
                  wrong: Mapping[int, int]) -> list[KeyConditionKafkaError]:
    """Each record's error of a refused conditional batch: KEY_OFFSET_MISMATCH with the
    actual offset for a failed condition, OPERATION_NOT_ATTEMPTED for the others (written
    whole or not at all), as native mode reports them."""
    where = f"{topic}[{partition}]"
    first = min(wrong)
    out = []
    for i, key in enumerate(keys):
        kb = None if key is None else key_bytes(key)
        want = expected[i]
        if i in wrong:
            actual = wrong[i]
            text = (f"{where}: key {kb!r}: expected "
                    f"{'absent' if want == KEY_ABSENT else want}, actual "
                    f"{'absent' if actual == KEY_ABSENT else actual}; nothing of its batch "
                    "was written (emulated)")
            out.append(KeyConditionKafkaError(ec.KEY_OFFSET_MISMATCH, text, topic=topic,
                                              partition=partition, key=kb, expected=want,
                                              actual=actual))
        else:
            text = (f"{where}: not written: the condition on key {keys[first]!r} (record "
                    f"{first} of the same batch) failed, and a batch is written whole or not "
                    "at all")
            out.append(KeyConditionKafkaError(ec.OPERATION_NOT_ATTEMPTED, text, topic=topic,
                                              partition=partition, key=kb, expected=want,
                                              actual=KEY_ABSENT))
    return out


def batch_failed(topic: str, partition: int, keys: list, expected: list, code: int,
                 text: str, *, retriable: bool = False) -> list[KeyConditionKafkaError]:
    """Every record of a conditional batch failed with the same ``code`` (a refused partition
    count, a fenced writer, a timeout): none written."""
    return [KeyConditionKafkaError(code, f"{topic}[{partition}]: {text}", topic=topic,
                                   partition=partition,
                                   key=None if key is None else key_bytes(key),
                                   expected=expected[i], actual=KEY_ABSENT,
                                   retriable=retriable)
            for i, key in enumerate(keys)]


def retention_ages_keys_out(admin: Any, topic: str, timeout_s: float) -> str | None:
    """What in ``topic``'s configuration can delete a key's last record (a ``delete`` cleanup
    policy with a finite ``retention.ms`` or ``retention.bytes``), or None."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout_s)
    except KafkaException:
        raise
    except Exception as exc:  # noqa: BLE001 - a timeout of the future, say
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                        f"the configuration of {topic}: {exc}")) from None

    def value(name: str, default: str) -> str:
        entry = configs.get(name)
        return default if entry is None or entry.value is None else str(entry.value)

    policy = value("cleanup.policy", "delete")
    if "delete" not in [p.strip() for p in policy.split(",")]:
        return None
    ms, size = int(value("retention.ms", "-1")), int(value("retention.bytes", "-1"))
    if ms < 0 and size < 0:
        return None
    return f"cleanup.policy={policy} with retention.ms={ms}, retention.bytes={size}"
