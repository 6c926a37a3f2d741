"""Exceptions raised by kipproducer.

This module imports nothing from the rest of the package so the native modules can import it at
load time.
"""

from __future__ import annotations


class KipError(Exception):
    """Base class of kipproducer's own exceptions."""


class CorruptRecordError(KipError, ValueError):
    """A record batch broke a rule of the RecordBatch v2 format.

    ``rule`` names the broken rule in a word or two (``"crc"``, ``"magic"``, ``"batch_length"``,
    ``"record_count"``, ``"offset_delta"``, ``"varint"``, ``"record_size"``, ``"truncated"``,
    ``"decompression"``, ...), so callers can map it to a Kafka error code.
    """

    def __init__(self, message: str, rule: str = "corrupt") -> None:
        super().__init__(message)
        self.rule = rule


class OffsetOrderError(KipError, ValueError):
    """An explicit offset did not strictly increase within its partition (KIP-391)."""


class QueueFullError(KipError, BufferError):
    """The accumulator's memory or message bound is reached; call poll()/flush() and retry.

    A ``BufferError`` like librdkafka's "Local: Queue full", so code that catches BufferError
    around ``produce()`` keeps working.
    """


# ---- produce-with-offsets (KIP-391) and conditional publish (KIP-27) ----------------------------
# confluent_kafka is a dependency of the package and imports none of ours, so importing it here
# keeps this module free of package imports.
from confluent_kafka import KafkaError as _KafkaError  # noqa: E402
from confluent_kafka import KafkaException as _KafkaException  # noqa: E402

#: The wire codes of docs/protocol.md §5 (no Kafka release uses them).
INVALID_PRODUCE_OFFSET = 10391
OFFSET_MISMATCH = 10027
#: Per-key conditional produce (docs/protocol.md §10).
KEY_OFFSET_MISMATCH = 10044
KEY_INDEX_INCOMPLETE = 10045
PARTITION_COUNT_MISMATCH = 10046

KEY_ABSENT = -1
"""``expected_key_offset=KEY_ABSENT``: the key must have no live record in its partition (never
written, or last written as a tombstone); also the ``actual`` of a KeyOffsetMismatchError
for such a key."""

NO_KEY_CONDITION = -2
"""An entry of ``produce_arrays(expected_key_offsets=...)`` that puts no condition on its
record (an int64 array cannot hold None)."""

_KIP_ERROR_NAMES = {INVALID_PRODUCE_OFFSET: "INVALID_PRODUCE_OFFSET",
                    OFFSET_MISMATCH: "OFFSET_MISMATCH",
                    KEY_OFFSET_MISMATCH: "KEY_OFFSET_MISMATCH",
                    KEY_INDEX_INCOMPLETE: "KEY_INDEX_INCOMPLETE",
                    PARTITION_COUNT_MISMATCH: "PARTITION_COUNT_MISMATCH"}


class ProduceOffsetKafkaError(_KafkaError):
    """A ``confluent_kafka.KafkaError`` for a record sent with ``offset=`` or
    ``expected_offset=``: ``code()`` as usual, plus ``log_end_offset``, the partition's log end
    offset as the broker reported it with the answer (-1 when there was no answer).

    ``code()`` is INVALID_PRODUCE_OFFSET (10391) when a KIP-391 offset was below the log end,
    OFFSET_MISMATCH (10027) when a KIP-27 expected offset was not the log end; other codes
    (authorization, timeouts, ...) carry ``log_end_offset`` when the broker sent it.
    """

    def __init__(self, code: int, message: str, *, log_end_offset: int = -1,
                 retriable: bool = False, fatal: bool = False) -> None:
        super().__init__(code, message, fatal=fatal, retriable=retriable)
        self.log_end_offset = log_end_offset

    def name(self) -> str:
        return _KIP_ERROR_NAMES.get(self.code()) or super().name()

    def __repr__(self) -> str:
        return (f"ProduceOffsetKafkaError(code={self.name()}, val={self.code()}, "
                f"str={self.str()!r}, log_end_offset={self.log_end_offset})")

    __str__ = __repr__


class ProduceOffsetException(KipError, _KafkaException):
    """Raised by the waiting call :meth:`kipproducer.Producer.append`; ``args[0]`` is the
    :class:`ProduceOffsetKafkaError`, so ``except KafkaException`` and ``err.code()`` work."""

    def __init__(self, error: _KafkaError) -> None:
        super().__init__(error)
        self.error = error
        self.log_end_offset = getattr(error, "log_end_offset", -1)


class InvalidProduceOffsetError(ProduceOffsetException):
    """KIP-391: an offset was below the partition's log end (``log_end_offset``); nothing of
    that batch was written."""


class OffsetMismatchError(ProduceOffsetException):
    """KIP-27: the partition's log did not end at the expected offset; it ends at
    ``log_end_offset``. Nothing in that request was written."""


class KeyConditionKafkaError(ProduceOffsetKafkaError):
    """The delivery error of one record sent with ``expected_key_offset=`` (docs/protocol.md
    §10) that was not appended: ``topic``, ``partition``, ``key``, ``expected`` and ``actual``
    besides ``code()``.

    ``code()`` is KEY_OFFSET_MISMATCH (10044) when the key's last offset was not the one
    expected (``actual``: that offset, or ``KEY_ABSENT``); CONCURRENT_TRANSACTIONS (51) when
    another producer's open transaction had written the key (retried until
    delivery.timeout.ms); KEY_INDEX_INCOMPLETE (10045) when the broker's bounded index could
    not answer; OPERATION_NOT_ATTEMPTED (55) for a record of the same batch whose own
    condition (or none) was fine but which was not appended because another one failed
    (``actual`` is then -1 and ``expected`` its own condition or None).
    """

    def __init__(self, code: int, message: str, *, topic: str, partition: int,
                 key: bytes | None, expected: int | None, actual: int,
                 retriable: bool = False) -> None:
        super().__init__(code, message, retriable=retriable)
        self.topic = topic
        self.partition = partition
        self.key = key
        self.expected = expected
        self.actual = actual

    def __repr__(self) -> str:
        return (f"KeyConditionKafkaError(code={self.name()}, val={self.code()}, "
                f"str={self.str()!r}, topic={self.topic!r}, partition={self.partition}, "
                f"key={self.key!r}, expected={self.expected}, actual={self.actual})")

    __str__ = __repr__


class KeyOffsetMismatchError(ProduceOffsetException):
    """docs/protocol.md §10: a key's last offset in its partition was not the one expected;
    nothing of the record's batch was written. ``topic``, ``partition``, ``key``,
    ``expected`` and ``actual`` (the key's last offset, or ``KEY_ABSENT``) say which."""

    def __init__(self, error: _KafkaError) -> None:
        super().__init__(error)
        self.topic: str | None = getattr(error, "topic", None)
        self.partition: int = getattr(error, "partition", -1)
        self.key: bytes | None = getattr(error, "key", None)
        self.expected: int | None = getattr(error, "expected", None)
        self.actual: int = getattr(error, "actual", KEY_ABSENT)


def raise_for(error: _KafkaError) -> None:
    """Raise the most specific exception for a produce error."""
    code = error.code()
    if code == INVALID_PRODUCE_OFFSET:
        raise InvalidProduceOffsetError(error)
    if code == OFFSET_MISMATCH:
        raise OffsetMismatchError(error)
    if code == KEY_OFFSET_MISMATCH:
        raise KeyOffsetMismatchError(error)
    raise ProduceOffsetException(error)
