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
