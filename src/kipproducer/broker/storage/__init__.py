"""The broker's durable storage: partition logs on disk and the data dir that holds them.

- ``PartitionLog`` (partition_log.py): one topic-partition: segments, indexes, appends with
  assigned or explicit (KIP-391) offsets, fetch reads, ListOffsets lookups, retention,
  DeleteRecords, compaction, flush policy and crash recovery.
- ``LogConfig`` (log_config.py): topic-level configs with Kafka's names and defaults.
- ``LogManager`` (log_manager.py): a data dir of many partitions and their topic metadata.
- errors.py: exceptions, each with the Kafka ``error_code`` to answer with.

Names are imported lazily so that importing one module of the package (the producer state
imports ``durable_files``) does not import all of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AppendResult": "partition_log",
    "LogReadResult": "partition_log",
    "PartitionLog": "partition_log",
    "CompactionStats": "compaction",
    "ConfigEntry": "log_config",
    "LogConfig": "log_config",
    "LogManager": "log_manager",
    "TopicInfo": "log_manager",
    "CorruptLogError": "errors",
    "InvalidAppendOffsetError": "errors",
    "InvalidConfigError": "errors",
    "InvalidPartitionsError": "errors",
    "InvalidTopicError": "errors",
    "LogClosedError": "errors",
    "LogOfflineError": "errors",
    "OffsetMismatchError": "errors",
    "OffsetOutOfRangeError": "errors",
    "StorageError": "errors",
    "TopicExistsError": "errors",
    "UnknownTopicError": "errors",
}

__all__ = [
    "AppendResult",
    "CompactionStats",
    "ConfigEntry",
    "CorruptLogError",
    "InvalidAppendOffsetError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "LogOfflineError",
    "LogReadResult",
    "OffsetMismatchError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "StorageError",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
]

if TYPE_CHECKING:
    from .compaction import CompactionStats
    from .errors import (
        CorruptLogError,
        InvalidAppendOffsetError,
        InvalidConfigError,
        InvalidPartitionsError,
        InvalidTopicError,
        LogClosedError,
        LogOfflineError,
        OffsetMismatchError,
        OffsetOutOfRangeError,
        StorageError,
        TopicExistsError,
        UnknownTopicError,
    )
    from .log_config import ConfigEntry, LogConfig
    from .log_manager import LogManager, TopicInfo
    from .partition_log import AppendResult, LogReadResult, PartitionLog


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
