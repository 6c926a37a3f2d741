"""Exceptions raised by the broker's storage layer.

Each carries ``error_code``, the Kafka error code the broker answers with, so the request
handlers can map an exception to a response without a lookup table of their own.
"""

from __future__ import annotations

from kipproducer.errors import KipError
from kipproducer.protocol.error_codes import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_PRODUCE_OFFSET,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    KEY_OFFSET_MISMATCH,
    OFFSET_MISMATCH,
    OFFSET_OUT_OF_RANGE,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
)


class StorageError(KipError):
    """Base class of storage errors; ``error_code`` is the Kafka code to answer with."""

    error_code = KAFKA_STORAGE_ERROR


class CorruptLogError(StorageError):
    """Data the log trusted (below its recovery point) is unreadable; needs an operator."""


class DamagedFileError(StorageError, ValueError):
    """A file of the data dir that cannot be rebuilt from the logs is damaged: the broker
    refuses to start, with this one message, rather than guess."""


class LogClosedError(StorageError):
    """The partition log was closed (or deleted) while a caller still used it."""


class LogOfflineError(LogClosedError):
    """The partition log hit an I/O error (a full disk, EIO, a failed fsync) and went offline:
    every request on it answers KAFKA_STORAGE_ERROR until the broker restarts on a healthy
    disk, as Kafka does with a failed log directory."""


class OffsetOutOfRangeError(StorageError):
    """A read or DeleteRecords offset outside [log start offset, log end offset]."""

    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log's range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidAppendOffsetError(StorageError):
    """An explicit-offset (KIP-391) batch starts below the log end offset."""

    error_code = INVALID_PRODUCE_OFFSET

    def __init__(self, base_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"batch base offset {base_offset} is below the log end offset {log_end_offset}; "
            "explicit offsets must be >= the log end offset"
        )
        self.base_offset = base_offset
        self.log_end_offset = log_end_offset


class OffsetMismatchError(StorageError):
    """A KIP-27 expected offset did not equal the log end offset."""

    error_code = OFFSET_MISMATCH

    def __init__(self, expected_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"expected the batch to land at offset {expected_offset} but the log end offset "
            f"is {log_end_offset}"
        )
        self.expected_offset = expected_offset
        self.log_end_offset = log_end_offset


class KeyConditionError(StorageError):
    """Per-key conditions (docs/protocol.md §10) the log refused; nothing was appended.

    ``error_code`` is KEY_OFFSET_MISMATCH, KEY_INDEX_INCOMPLETE or CONCURRENT_TRANSACTIONS;
    ``conflicts`` lists (record index, key, expected, actual) for every record whose condition
    failed (``actual``: the key's last offset, -1 absent, -2 unknown, -3 pending)."""

    error_code = KEY_OFFSET_MISMATCH

    def __init__(self, error_code: int, message: str,
                 conflicts: list[tuple[int, bytes, int, int]]) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.conflicts = conflicts


class InvalidConfigError(StorageError, ValueError):
    """A topic config name or value that Kafka would refuse."""

    error_code = INVALID_CONFIG

    def __init__(self, name: str, value: object, reason: str) -> None:
        # Kafka's ConfigException wording, so that its tools print the same line on either broker
        super().__init__(f"Invalid value {value} for configuration {name}: {reason}")
        self.name = name
        self.value = value
        self.reason = reason


class UnknownConfigError(InvalidConfigError):
    """A topic config name Kafka does not know."""

    def __init__(self, name: str, what: str = "topic") -> None:
        super().__init__(name, None, f"unknown {what} config")
        self.args = (f"Unknown {what} config name: {name}",)

    def __str__(self) -> str:
        return self.args[0]


class UnknownTopicError(StorageError, KeyError):
    error_code = UNKNOWN_TOPIC_OR_PARTITION

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class TopicExistsError(StorageError):
    error_code = TOPIC_ALREADY_EXISTS


class InternalTopicError(TopicExistsError):
    """A CreateTopics of __consumer_offsets or __transaction_state: Kafka's answer is that the
    topic exists (its coordinators create it); here their data lives outside the topics."""


class ReservedTopicError(StorageError):
    """A CreateTopics of a name no client may create (__cluster_metadata)."""

    error_code = INVALID_REQUEST


class InvalidTopicError(StorageError, ValueError):
    error_code = INVALID_TOPIC_EXCEPTION


class InvalidPartitionsError(StorageError, ValueError):
    error_code = INVALID_PARTITIONS
