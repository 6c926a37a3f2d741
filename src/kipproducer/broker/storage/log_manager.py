"""LogManager: the broker's data dir, holding every partition log and the topic metadata.

Layout of ``data_dir``:

- ``topics.json``: every topic's name, topic id (UUID), partition count and config overrides,
  rewritten atomically on each change. It is the truth about which topics exist.
- ``<topic>-<partition>/``: one PartitionLog each, with a ``partition.metadata`` file naming
  its topic id, as Kafka does, so a directory left behind by a deleted topic is recognised
  even if a topic with the same name was created since.
- ``producer-ids.json``: the producer id allocator's durable counter.
- ``.lock``: held (flock) while a LogManager has the directory open, so two brokers cannot
  share a data dir.

Deleting a topic first removes it from ``topics.json``, then renames its directories to
``...-delete`` and removes them; anything a crash leaves behind is removed on the next start.
All methods are thread-safe.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerIdAllocator
from .durable_files import fsync_dir, read_json, write_json_atomically
from .errors import (
    InternalTopicError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogClosedError,
    ReservedTopicError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from .log_config import LogConfig
from .partition_log import PartitionLog

log = logging.getLogger("kipproducer.broker.storage")


def _remove_tree(directory: Path) -> None:
    """Remove a directory already out of use (renamed to ``*-delete``), reporting what the
    disk would not remove (unlink or rmdir failing) in one line instead of raising: the
    removal is only disk space, and the next start tries again."""
    errors: list[BaseException] = []
    shutil.rmtree(directory, onerror=lambda function, path, exc_info: errors.append(exc_info[1]))
    if errors:
        log.error("could not remove %s (%d failures, the first: %s); the next start tries "
                  "again", directory, len(errors), errors[0])

TOPICS_FILE = "topics.json"
PRODUCER_IDS_FILE = "producer-ids.json"
PARTITION_METADATA_FILE = "partition.metadata"
LOCK_FILE = ".lock"
DELETE_SUFFIX = "-delete"
METADATA_VERSION = 1

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)")


#: Kafka's internal topics. Group offsets and transaction state exist here, but in the data
#: dir's own logs (``__groups``, ``__transactions``), not as topics a client can read.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
#: The KRaft metadata log's name: Kafka refuses to create it with INVALID_REQUEST.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS or name == CLUSTER_METADATA_TOPIC


def check_creatable(name: str) -> None:
    """Refuse the names Kafka reserves, with Kafka's error codes."""
    if name == CLUSTER_METADATA_TOPIC:
        raise ReservedTopicError(f"creation of the internal topic {name} is prohibited")
    if name in INTERNAL_TOPICS:
        raise InternalTopicError(
            f"topic {name!r} already exists: it is an internal topic, kept by this broker in "
            "its own log in the data dir and not readable as a topic"
        )


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; raises InvalidTopicError with Kafka's words (its tools print
    them, and they must read the same on either broker)."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (f"the length of '{name}' is longer than the max allowed length "
                  f"{MAX_TOPIC_NAME_LENGTH}")
    elif not _LEGAL_TOPIC_NAME.fullmatch(name):
        reason = (f"'{name}' contains one or more characters other than ASCII alphanumerics, "
                  "'.', '_' and '-'")
    else:
        return
    raise InvalidTopicError(f"Topic name is invalid: {reason}")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    config: LogConfig


@dataclass(slots=True)
class MaintenanceReport:
    """What one run of the periodic tasks did."""

    segments_deleted: int = 0
    partitions_compacted: int = 0
    records_compacted: int = 0
    partitions_flushed: int = 0
    producers_expired: int = 0
    errors: list[str] = field(default_factory=list)


class LogManager:
    """Every partition log of a data dir.

    ``LogManager(data_dir)`` locks the directory, reads ``topics.json``, opens (and recovers)
    every partition and removes leftovers of deleted topics. ``broker_defaults`` are the
    broker-wide values of topic configs, by topic config name (``{"retention.ms": ...}``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        broker_defaults: Mapping[str, str] | None = None,
        producer_id_block_size: int = 1000,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        compaction_backoff_ms: int = 15_000,
        checkpoint_interval_ms: int = 60_000,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.broker_defaults = dict(broker_defaults or {})
        LogConfig.parse(broker_defaults=self.broker_defaults)  # fail early on bad defaults
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.compaction_backoff_ms = compaction_backoff_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._lock = threading.RLock()
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._last_compaction_ms: dict[tuple[str, int], int] = {}
        self._last_checkpoint_ms = int(time.time() * 1000)
        self._closed = False
        self._lock_fd = self._lock_data_dir()
        try:
            self.producer_ids = ProducerIdAllocator(
                self.data_dir / PRODUCER_IDS_FILE, block_size=producer_id_block_size
            )
            self._load()
        except BaseException:
            try:
                self._close_logs()
            except StorageError:
                pass  # logged; the error that stopped the start is the one to raise
            finally:
                self._release_lock()
            raise

    # -- start-up -------------------------------------------------------------------------------

    def _lock_data_dir(self) -> int:
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(f"data dir {self.data_dir} is in use by another broker") from None
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = -1

    def _load(self) -> None:
        for name in os.listdir(self.data_dir):
            if name.endswith(DELETE_SUFFIX):
                log.info("removing %s, left over from a topic deletion", name)
                _remove_tree(self.data_dir / name)
        document = read_json(self.data_dir / TOPICS_FILE)
        partition_dirs = [
            name
            for name in os.listdir(self.data_dir)
            if (self.data_dir / name / PARTITION_METADATA_FILE).exists()
        ]
        if document is None:
            if partition_dirs:
                raise StorageError(
                    f"{self.data_dir} holds partition directories but no {TOPICS_FILE}; "
                    "refusing to guess which topics exist"
                )
            document = {"version": METADATA_VERSION, "topics": {}}
            write_json_atomically(self.data_dir / TOPICS_FILE, document)
        if document.get("version") != METADATA_VERSION:
            raise StorageError(f"{self.data_dir / TOPICS_FILE} has an unknown version")
        for name, entry in document["topics"].items():
            config = LogConfig.parse(entry.get("configs", {}), broker_defaults=self.broker_defaults)
            info = TopicInfo(name, uuid.UUID(entry["topic_id"]), int(entry["partitions"]), config)
            self._topics[name] = info
            for partition in range(info.partitions):
                self._open_partition(info, partition)
        for name in partition_dirs:
            if not self._is_live_partition_dir(name):
                log.warning("removing %s: it belongs to no existing topic", name)
                self._remove_dir(self.data_dir / name)

    def _is_live_partition_dir(self, dir_name: str) -> bool:
        match = _PARTITION_DIR.fullmatch(dir_name)
        if match is None:
            return False
        info = self._topics.get(match["topic"])
        if info is None or int(match["partition"]) >= info.partitions:
            return False
        metadata = read_json(self.data_dir / dir_name / PARTITION_METADATA_FILE) or {}
        return metadata.get("topic_id") == str(info.topic_id)

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _open_partition(self, info: TopicInfo, partition: int) -> PartitionLog:
        directory = self._partition_dir(info.name, partition)
        metadata_path = directory / PARTITION_METADATA_FILE
        metadata = read_json(metadata_path) if metadata_path.exists() else None
        if metadata is not None and metadata.get("topic_id") != str(info.topic_id):
            # A directory of an earlier topic with the same name that a crash left behind.
            log.warning("removing %s: it belongs to an earlier topic %s", directory, info.name)
            self._remove_dir(directory)
            metadata = None
        partition_log = PartitionLog(directory, info.config)
        if metadata is None:
            try:
                write_json_atomically(
                    metadata_path,
                    {
                        "version": METADATA_VERSION,
                        "topic": info.name,
                        "partition": partition,
                        "topic_id": str(info.topic_id),
                    },
                )
            except BaseException:
                partition_log.close_handles()
                raise
        self._logs[(info.name, partition)] = partition_log
        return partition_log

    def _open_partitions(self, info: TopicInfo, partitions: range) -> None:
        """Open (create) these partitions, all or none: on a failure the ones opened are
        closed and removed again and the error is raised as a StorageError."""
        opened: list[int] = []
        try:
            for partition in partitions:
                self._open_partition(info, partition)
                opened.append(partition)
        except Exception as exc:
            failed = partitions[len(opened)] if len(opened) < len(partitions) else None
            self._remove_partitions(info, [*opened, *([failed] if failed is not None else [])])
            if isinstance(exc, StorageError):
                raise
            raise StorageError(
                f"cannot create partitions of {info.name}: {exc}") from exc

    def _remove_partitions(self, info: TopicInfo, partitions: list[int]) -> None:
        """Close (without a flush) and remove partitions just created."""
        # Release every descriptor first, so that removing the directories is possible even
        # when the failure was EMFILE.
        for partition in partitions:
            partition_log = self._logs.pop((info.name, partition), None)
            if partition_log is not None:
                partition_log.close_handles()
        for partition in partitions:
            directory = self._partition_dir(info.name, partition)
            try:
                if directory.exists():
                    self._remove_dir(directory)
            except OSError as exc:  # the disk that failed the creation fails this too
                log.warning("could not remove %s (%s); the next start removes it",
                            directory, exc)

    def _register(self, info: TopicInfo, new_partitions: range) -> None:
        """Write ``topics.json`` with ``info``, then take it as the topic's entry. When the
        file cannot be written, the new partitions are removed again and the topic stays as
        it was (a topic only in memory would be gone after a restart, with what was
        acknowledged in it)."""
        try:
            self._write_topics({**self._topics, info.name: info})
        except StorageError:
            self._remove_partitions(info, list(new_partitions))
            raise
        self._topics[info.name] = info

    def _remove_dir(self, directory: Path) -> None:
        doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        os.replace(directory, doomed)
        fsync_dir(self.data_dir)
        _remove_tree(doomed)

    def _write_topics(self, topics: Mapping[str, TopicInfo]) -> None:
        """Rewrite ``topics.json`` with ``topics``, before memory changes: a change the file
        does not hold is refused (StorageError) and not made, so a restart never undoes what
        a client was told."""
        document = {
            "version": METADATA_VERSION,
            "topics": {
                info.name: {
                    "topic_id": str(info.topic_id),
                    "partitions": info.partitions,
                    "configs": dict(info.config.overrides),
                }
                for info in topics.values()
            },
        }
        try:
            write_json_atomically(self.data_dir / TOPICS_FILE, document)
        except OSError as exc:
            raise StorageError(f"cannot write {self.data_dir / TOPICS_FILE}: {exc}") from exc

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        topic_id: uuid.UUID | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        """CreateTopics for one topic; ``validate_only`` checks everything and creates nothing.

        Raises InvalidTopicError, InvalidPartitionsError, InvalidConfigError or
        TopicExistsError.
        """
        validate_topic_name(name)
        check_creatable(name)
        if partitions < 1:
            raise InvalidPartitionsError(f"a topic needs at least one partition, not {partitions}")
        config = LogConfig.parse(configs or {}, broker_defaults=self.broker_defaults)
        with self._lock:
            self._check_open()
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")  # Kafka's words
            info = TopicInfo(name, topic_id or uuid.uuid4(), partitions, config)
            if validate_only:
                return info
            # Partitions first, the topic's registration last: a failure (EMFILE, ENOSPC) then
            # leaves nothing half-created, and a crash in between leaves only directories that
            # belong to no topic, which the next start removes.
            self._open_partitions(info, range(partitions))
            self._register(info, range(partitions))
            log.info("created topic %s (%s) with %d partitions", name, info.topic_id, partitions)
            return info

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> TopicInfo:
        """CreatePartitions: grow the topic to ``total`` partitions (never shrink)."""
        with self._lock:
            info = self.topic(name)
            # Kafka's words, so that kafka-topics prints the same line on either broker
            if total == info.partitions:
                raise InvalidPartitionsError(f"Topic already has {total} partition(s).")
            if total < info.partitions:
                raise InvalidPartitionsError(
                    f"The topic {name} currently has {info.partitions} partition(s); {total} "
                    "would not be an increase."
                )
            grown = TopicInfo(name, info.topic_id, total, info.config)
            if validate_only:
                return grown
            self._open_partitions(grown, range(info.partitions, total))
            self._register(grown, range(info.partitions, total))
            return grown

    def delete_topic(self, name: str) -> TopicInfo:
        """DeleteTopics for one topic: its metadata and every file of its partitions."""
        with self._lock:
            info = self.topic(name)
            self._write_topics(
                {other: entry for other, entry in self._topics.items() if other != name})
            del self._topics[name]
            for partition in range(info.partitions):
                partition_log = self._logs.pop((name, partition), None)
                self._last_compaction_ms.pop((name, partition), None)
                if partition_log is not None:
                    partition_log.close_handles()
                directory = self._partition_dir(name, partition)
                try:
                    if directory.exists():
                        # Renamed first, so a crash during the removal leaves a "-delete"
                        # directory that the next start removes.
                        self._remove_dir(directory)
                except OSError as exc:
                    # The topic is gone (topics.json says so): its files are only disk space,
                    # and the next start removes a directory that belongs to no topic.
                    log.error("could not remove %s (%s); the next start removes it",
                              directory, exc)
            try:
                fsync_dir(self.data_dir)
            except OSError as exc:  # (a crash may bring a renamed directory back: see above)
                log.error("could not fsync %s after deleting topic %s (%s)", self.data_dir,
                          name, exc)
            log.info("deleted topic %s (%s)", name, info.topic_id)
            return info

    def alter_topic_config(
        self, name: str, overrides: Mapping[str, str | None], *, validate_only: bool = False
    ) -> TopicInfo:
        """AlterConfigs: replace the topic's overrides with ``overrides``."""
        with self._lock:
            info = self.topic(name)
            return self._set_config(info, info.config.with_overrides(overrides), validate_only)

    def incremental_alter_topic_config(
        self,
        name: str,
        set_values: Mapping[str, str] | None = None,
        delete: list[str] | tuple[str, ...] = (),
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """IncrementalAlterConfigs SET / DELETE on the topic's overrides."""
        with self._lock:
            info = self.topic(name)
            return self._set_config(info, info.config.altered(set_values, delete), validate_only)

    def set_broker_defaults(self, defaults: Mapping[str, str]) -> None:
        """New broker defaults (dynamic broker configs): every topic's config follows them
        where the topic has no override of its own, as Kafka's do."""
        LogConfig.parse(broker_defaults=defaults)  # a bad default changes nothing
        with self._lock:
            self.broker_defaults = dict(defaults)
            for name, info in list(self._topics.items()):
                config = LogConfig.parse(info.config.overrides, broker_defaults=defaults)
                self._topics[name] = TopicInfo(info.name, info.topic_id, info.partitions,
                                               config)
                for partition in range(info.partitions):
                    self._logs[(info.name, partition)].update_config(config)

    def _set_config(self, info: TopicInfo, config: LogConfig, validate_only: bool) -> TopicInfo:
        updated = TopicInfo(info.name, info.topic_id, info.partitions, config)
        if validate_only:
            return updated
        self._write_topics({**self._topics, info.name: updated})
        self._topics[info.name] = updated
        for partition in range(info.partitions):
            self._logs[(info.name, partition)].update_config(config)
        return updated

    def topic(self, name: str) -> TopicInfo:
        with self._lock:
            self._check_open()
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"unknown topic {name!r}")
            return info

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        with self._lock:
            for info in self._topics.values():
                if info.topic_id == topic_id:
                    return info
            raise UnknownTopicError(f"unknown topic id {topic_id}")

    def topics(self) -> dict[str, TopicInfo]:
        with self._lock:
            return dict(self._topics)

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a partition; UnknownTopicError (UNKNOWN_TOPIC_OR_PARTITION) if none."""
        with self._lock:
            partition_log = self._logs.get((topic, partition))
            if partition_log is None:
                raise UnknownTopicError(f"unknown topic-partition {topic}-{partition}")
            return partition_log

    def logs(self) -> Iterator[tuple[tuple[str, int], PartitionLog]]:
        """A snapshot of (topic, partition) -> log pairs."""
        with self._lock:
            items = list(self._logs.items())
        return iter(items)

    # -- producer ids ---------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id for InitProducerId, never handed out before by this data dir."""
        return self.producer_ids.allocate()

    # -- periodic tasks -------------------------------------------------------------------------

    def run_periodic_tasks(
        self, now_ms: int | None = None, *, retention: bool = True
    ) -> MaintenanceReport:
        """Retention, compaction, flush.ms, producer expiry and checkpoints for every partition.

        Call it from a timer (Kafka's defaults: every few seconds is plenty). Compaction can
        take a while on a big partition, so the broker should run this in a worker thread;
        every partition log stays usable meanwhile. A failure in one partition is logged and
        reported, and does not stop the others.
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        report = MaintenanceReport()
        checkpoint = now_ms - self._last_checkpoint_ms >= self.checkpoint_interval_ms
        for key, partition_log in self.logs():
            try:
                if retention:
                    report.segments_deleted += partition_log.apply_retention(now_ms)
                if (
                    partition_log.config.compact
                    and now_ms - self._last_compaction_ms.get(key, -(2**62))
                    >= self.compaction_backoff_ms
                    and partition_log.needs_compaction(now_ms)
                ):
                    self._last_compaction_ms[key] = now_ms
                    stats = partition_log.compact(now_ms)
                    if stats.segments_cleaned:
                        report.partitions_compacted += 1
                        report.records_compacted += stats.records_removed
                if partition_log.flush_if_due(now_ms):
                    report.partitions_flushed += 1
                report.producers_expired += len(
                    partition_log.expire_producers(now_ms, self.producer_id_expiration_ms)
                )
                if checkpoint:
                    partition_log.checkpoint()
            except LogClosedError:
                continue  # deleted meanwhile
            except Exception as exc:
                log.exception("periodic tasks failed for %s-%d", *key)
                report.errors.append(f"{key[0]}-{key[1]}: {exc}")
        if checkpoint:
            self._last_checkpoint_ms = now_ms
        return report

    # -- shutdown -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log manager for {self.data_dir} is closed")

    def _close_logs(self) -> None:
        """Close every partition, also after one failed (a failing disk): StorageError at
        the end naming how many failed; each failure is logged."""
        failed = []
        for partition_log in self._logs.values():
            try:
                partition_log.close()
            except StorageError as exc:
                log.error("%s", exc)
                failed.append(partition_log.directory.name)
        self._logs.clear()
        if failed:
            raise StorageError(
                f"{len(failed)} partition logs were not closed cleanly ({', '.join(failed)}): "
                "see the errors logged; the next start recovers them"
            )

    def close(self) -> None:
        """Close every partition cleanly (flush, indexes, checkpoints) and unlock the dir."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._close_logs()
            finally:
                self._release_lock()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
