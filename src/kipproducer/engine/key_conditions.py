"""Per-key conditions in the engine (docs/protocol.md §10).

A batch whose records carry ``expected_key_offset=`` goes out with a KeyConditions tag (from
``ProducerBatch.key_conditions``, filled by the accumulator), and the broker appends it whole
or not at all. When it refuses the batch, each record gets its own error: a record whose
condition failed gets KEY_OFFSET_MISMATCH (or KEY_INDEX_INCOMPLETE, CONCURRENT_TRANSACTIONS)
with the key's actual last offset, the others OPERATION_NOT_ATTEMPTED: none is reported as
written.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from kipproducer._accumulator import ProducerBatch
from kipproducer.errors import KEY_ABSENT, KeyConditionKafkaError
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import (
    KeyConditionsFormatError,
    decode_key_conflicts,
    encode_key_conditions,
)
from kipproducer.records import decode_batches

#: KeyConflicts' actual offsets that are not offsets (docs/protocol.md §10)
_UNKNOWN, _PENDING = -2, -3
_CONDITION_CODES = frozenset((ec.KEY_OFFSET_MISMATCH, ec.KEY_INDEX_INCOMPLETE,
                              ec.CONCURRENT_TRANSACTIONS))


class KeyConditionsBatchError(KafkaError):
    """A refused conditional batch's error: ``code()`` the partition's, and ``per_record``
    the error of each of its records (what delivery reports hand out)."""

    def __init__(self, code: int, message: str, per_record: list[KeyConditionKafkaError]
                 ) -> None:
        super().__init__(code, message, retriable=ec.is_retriable(code))
        self.per_record = per_record


def conditions_by_partition(batches: list[ProducerBatch]) -> dict[tuple[str, int], bytes]:
    """The KeyConditions tag of each partition of a request whose batch has conditions (one
    batch per partition: conditions ride on ProduceMode 0)."""
    return {(batch.topic, batch.partition): encode_key_conditions(
                batch.key_partition_count,
                [(index, expected) for index, expected, _ in batch.key_conditions])
            for batch in batches if batch.key_conditions is not None}


def _actual_text(actual: int) -> str:
    if actual == _UNKNOWN:
        return "unknown (the broker's key index forgot it: kip.key.index.max.keys)"
    if actual == _PENDING:
        return "pending in another producer's open transaction"
    return "absent" if actual == KEY_ABSENT else str(actual)


def _record_code(actual: int) -> int:
    if actual == _PENDING:
        return ec.CONCURRENT_TRANSACTIONS
    if actual == _UNKNOWN:
        return ec.KEY_INDEX_INCOMPLETE
    return ec.KEY_OFFSET_MISMATCH


def batch_error(batch: ProducerBatch, code: int, message: str | None,
                conflicts_tag: bytes | None) -> KeyConditionsBatchError:
    """The error of a conditional batch the broker refused with ``code``."""
    where = f"{batch.topic}[{batch.partition}]"
    conditions = {index: (expected, key) for index, expected, key in batch.key_conditions or ()}
    try:
        conflicts = dict(decode_key_conflicts(conflicts_tag)) if conflicts_tag else {}
    except KeyConditionsFormatError as exc:
        conflicts = {}
        message = f"{message or ec.error_name(code)} (KeyConflicts unreadable: {exc})"
    keys = [record.key for part in decode_batches(batch.data, validate=False) for record in part]
    first = next(iter(sorted(conflicts)), None)
    per_record = []
    for index, key in enumerate(keys):
        expected = conditions.get(index, (None, None))[0]
        if index in conflicts:
            actual = conflicts[index]
            record_code = _record_code(actual)
            text = (f"{where}: key {key!r}: expected "
                    f"{'absent' if expected == KEY_ABSENT else expected}, actual "
                    f"{_actual_text(actual)}; nothing of its batch was written")
            actual = actual if actual >= KEY_ABSENT else KEY_ABSENT
        elif code in _CONDITION_CODES and first is not None:
            record_code, actual = ec.OPERATION_NOT_ATTEMPTED, KEY_ABSENT
            text = (f"{where}: not written: the condition on key {keys[first]!r} (record "
                    f"{first} of the same batch) failed, and a batch is written whole or not "
                    "at all")
        else:
            record_code, actual = code, KEY_ABSENT
            text = f"{where}: {message or ec.error_name(code)}"
        per_record.append(KeyConditionKafkaError(
            record_code, text, topic=batch.topic, partition=batch.partition,
            key=None if key is None else bytes(key), expected=expected, actual=actual,
            retriable=ec.is_retriable(record_code)))
    return KeyConditionsBatchError(code, message or ec.error_name(code), per_record)
