"""The mirror's loop: a reader takes the source's records, a writer of the chosen mode writes
the target (writers.py), the topic map follows the source's topics (topics.py).

Two readers: the fast one (fetcher.py) fetches whole record batches in a thread of its own and
the writers forward them without decoding; a librdkafka consumer (this module) serves the
source configs the fast one cannot (SASL mechanisms other than PLAIN and SCRAM, such as
GSSAPI; TLS sources are read by the fast one), one
Python Message per record. ``Mirror.reader_kind`` (and the metrics' ``reader``) says which ran.

The main thread writes, serves delivery reports and commits, so a stop (``stop()``,
SIGINT/SIGTERM in ``kip mirror``) takes effect between two rounds: after the current batch
(preserve) or transaction (transactional) is finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..clients import connection_properties, first_records
from .fetcher import FetchReader, unsupported
from .metrics import Metrics
from .topics import (
    CLIENT_ERRORS,
    MirrorError,
    TopicMap,
    TopicPair,
    error_text,
    kafka_error_of,
    retry_transient,
)
from .writers import PreserveWriter, TransactionalWriter, Writer

T = TypeVar("T")

log = logging.getLogger("kipproducer.mirror")

MODES = ("preserve", "transactional")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
READERS = ("auto", "fetch", "consumer")
#: Records one consume() call takes at the most.
CONSUME_BATCH = 10_000


class Mirror:
    """Copies the source topics matching ``topics`` to the target cluster.

    ``mode="preserve"`` (KIP-391): every record at its source offset; resumes from the target's
    log ends. ``mode="transactional"`` (KIP-656): records and the source offsets committed in
    one target transaction, the offsets in the target group ``group``; resumes from them.
    See docs/mirror.md.
    """

    def __init__(self, source: str, target: str, topics: str, *, mode: str = "preserve",
                 group: str | None = None, source_config: Mapping[str, Any] | None = None,
                 target_config: Mapping[str, Any] | None = None,
                 isolation: str = "read_committed", rename: str = "{topic}",
                 metrics_json: str | None = None, progress: bool = True,
                 commit_interval_ms: int = 1000, group_sync_interval_ms: int = 10_000,
                 metadata_interval_ms: int = 5000, transactional_id: str | None = None,
                 timeout: float = 30.0, reader: str = "auto") -> None:
        if mode not in MODES:
            raise MirrorError(f"mode {mode!r}: one of {', '.join(MODES)}")
        if isolation not in ISOLATION_LEVELS:
            raise MirrorError(f"isolation {isolation!r}: one of {', '.join(ISOLATION_LEVELS)}")
        if reader not in READERS:
            raise MirrorError(f"reader {reader!r}: one of {', '.join(READERS)}")
        if mode == "transactional" and not group:
            raise MirrorError("the transactional mode needs --group: the target group that "
                              "holds the source offsets committed with the data")
        self.mode = mode
        self.group = group
        self.isolation = isolation
        self.timeout = timeout
        self.source_config = {"bootstrap.servers": source, **(source_config or {})}
        why_not = unsupported(self.source_config)
        if reader == "fetch" and why_not:
            raise MirrorError(f"the fetch reader cannot read this source: {why_not}")
        if reader == "auto" and why_not:
            log.warning("reading the source with a librdkafka consumer (the slower path): %s",
                        why_not)
        #: "fetch" (whole batches forwarded) or "consumer" (librdkafka, record by record)
        self.reader_kind = "consumer" if (reader == "consumer" or why_not) else "fetch"
        self._reader_asked = reader
        self.target_config = {"bootstrap.servers": target, **(target_config or {})}
        self.commit_interval_s = commit_interval_ms / 1000
        self.group_sync_interval_s = group_sync_interval_ms / 1000
        self.metadata_interval_s = metadata_interval_ms / 1000
        self.transactional_id = transactional_id or (f"kip-mirror-{group}" if group else None)
        self.metrics = Metrics(mode, metrics_json, progress=progress)
        self.metrics.reader = self.reader_kind
        self.topics = TopicMap(connection_properties(self.source_config),
                               connection_properties(self.target_config),
                               topics, rename, timeout)
        self._stopping = False
        self.consumer: Consumer | None = None
        self.fetcher: FetchReader | None = None
        self._probes: dict[str, Consumer] = {}  # "source" / "target": see _probe()
        self.writer: Writer | None = None
        # source (topic, partition) -> its pair, for the partitions being copied
        self.assigned: dict[tuple[str, int], TopicPair] = {}
        self.at_end: set[tuple[str, int]] = set()

    def stop(self) -> None:
        """Finish the current batch or transaction, then return from run() (signal-safe)."""
        self._stopping = True

    # ---- the loop -----------------------------------------------------------------------------

    def run(self, *, once: bool = False) -> dict:
        """Copy until stop() (or, with ``once``, until every partition is caught up with the
        source). Returns the final metrics snapshot."""
        try:
            self._check_reachable()
            return self._run(once)
        finally:
            self.close_probes()
            self.topics.close()

    def _run(self, once: bool) -> dict:
        last_refresh = 0.0
        try:
            writer_class = PreserveWriter if self.mode == "preserve" else TransactionalWriter
            self.writer = writer_class(self)
            first = self.topics.refresh()
            if self.reader_kind == "fetch" and self.writer.needs_records(first):
                if self._reader_asked == "fetch":
                    raise MirrorError("the fetch reader forwards whole batches at their source "
                                      "offsets, which needs the KIP-WIRE extension on the "
                                      "target; this target has none (emulated mode): use "
                                      "--reader consumer or auto")
                log.info("reading the source with a librdkafka consumer: the target has no "
                         "KIP-WIRE extension and the emulation writes records, not batches")
                self.reader_kind = self.metrics.reader = "consumer"
            if self.reader_kind == "fetch" and not self.writer.can_forward():
                if self._reader_asked == "fetch":
                    raise MirrorError("the fetch reader needs a target producer that runs "
                                      "kipproducer's engine; this --target-config (GSSAPI) keeps "
                                      "librdkafka's transactions")
                log.warning("reading the source with a librdkafka consumer (the slower path): "
                            "the target producer keeps librdkafka's transactions with this "
                            "--target-config (GSSAPI), so it cannot take whole batches")
                self.reader_kind = self.metrics.reader = "consumer"
            if self.reader_kind == "fetch":
                self.fetcher = FetchReader(self.source_config, self.isolation,
                                           timeout=self.timeout)
            else:
                self.consumer = self._consumer()
            self._assign(first)
            waiting_said = False
            while not self._stopping:
                if time.monotonic() - last_refresh >= self.metadata_interval_s:
                    self._assign(self.topics.refresh())
                    last_refresh = time.monotonic()
                    if not self.assigned:  # a typo in --topics must not look like a hang
                        pattern = self.topics.pattern.pattern
                        if once:
                            raise MirrorError(f"no source topic matches --topics {pattern!r}: "
                                              "nothing to copy")
                        if not waiting_said:
                            log.warning("no source topic matches %r yet; waiting for one",
                                        pattern)
                            waiting_said = True
                if self.fetcher is not None:
                    self._fetch_round()
                else:
                    self._round()
                caught_up = bool(self.assigned) and self.at_end >= set(self.assigned)
                self.writer.maybe_commit(caught_up=caught_up)
                self.metrics.tick()
                if once and caught_up and self.writer.idle():
                    break
            self.writer.finish()
        finally:
            self.metrics.tick(final=True)
            if self.writer is not None:
                self.writer.close()
            if self.fetcher is not None:
                self.fetcher.close()
            if self.consumer is not None:
                self.consumer.close()
        return self.metrics.snapshot()

    def _fetch_round(self) -> None:
        for fetched in self.fetcher.poll(0.1):
            key = (fetched.topic, fetched.partition)
            pair = self.assigned.get(key)
            if pair is None:
                continue
            self.writer.forward(pair, fetched)
            self.metrics.partition(pair.source, pair.target,
                                   fetched.partition).high_watermark = fetched.high_watermark
            if fetched.at_end:
                self.at_end.add(key)
            else:
                self.at_end.discard(key)

    def seek(self, key: tuple[str, int], offset: int) -> None:
        """Read a source partition again from ``offset`` (the transactional writer's abort)."""
        if self.fetcher is not None:
            self.fetcher.seek(key, offset)
        else:
            self.consumer.seek(TopicPartition(key[0], key[1], offset))
        self.at_end.discard(key)

    def _consumer(self) -> Consumer:
        return Consumer({
            # Throughput first (a copy reads everything); --source-config overrides these.
            # fetch.queue.backoff.ms: the pause before fetching again for a partition whose
            # client queue is full (the writer behind). librdkafka's 1000 ms stalls a copy
            # for a second each time; 0 made the broker threads spin while the writer waited
            # (on a 3-node target, 5 of the run's 6 CPU seconds), 5 ms costs neither.
            "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 8 << 20,
            "queued.max.messages.kbytes": 256 << 10, "fetch.queue.backoff.ms": 5,
            **self.source_config, "group.id": f"kip-mirror-reader-{id(self)}",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": True,
            "isolation.level": self.isolation})

    def _round(self) -> None:
        by_partition: dict[tuple[str, int], list] = {}
        eof_at: dict[tuple[str, int], int] = {}  # where the reader met a partition's end
        # consume(n, timeout) waits for n messages or the timeout: a live copy's trickle would
        # wait the whole 100 ms every round. One message (at once when one is there), then
        # whatever else is already fetched, without waiting.
        messages = self.consumer.consume(1, 0.1)
        if messages:
            messages += self.consumer.consume(CONSUME_BATCH - 1, 0)
        for msg in messages:
            error = msg.error()
            if error is not None:
                key = (msg.topic(), msg.partition())
                if error.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(key)
                    eof_at[key] = msg.offset()
                    continue
                if error.fatal() or error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                     KafkaError.GROUP_AUTHORIZATION_FAILED):
                    raise MirrorError(f"reading the source {key}: {error.str()}")
                log.warning("source: %s", error.str())
                continue
            key = (msg.topic(), msg.partition())
            found = by_partition.get(key)
            if found is None:
                by_partition[key] = [msg]
            else:
                found.append(msg)
            if key in self.at_end:  # an end seen before this record is no end any more
                self.at_end.discard(key)
        for key, messages in by_partition.items():
            pair = self.assigned.get(key)
            if pair is not None:
                self.writer.write(pair, key[1], messages)
        for key, offset in eof_at.items():
            pair = self.assigned.get(key)
            if pair is not None and key in self.at_end:
                self.writer.source_position(pair, key[1], offset)

    def _assign(self, pairs: list[TopicPair]) -> None:
        new = [(pair, p) for pair in pairs for p in range(pair.partitions)
               if (pair.source, p) not in self.assigned]
        if not new:
            return
        starts = self.writer.resume(new)
        tps = []
        for pair, p in new:
            self.assigned[(pair.source, p)] = pair
            m = self.metrics.partition(pair.source, pair.target, p)
            start = starts[(pair.source, p)]
            m.next_offset = start
            tps.append(TopicPartition(pair.source, p, start))
        log.info("copying %s", ", ".join(f"{tp.topic}[{tp.partition}] from {tp.offset}"
                                          for tp in tps))
        if self.fetcher is not None:
            self.fetcher.assign({(tp.topic, tp.partition): tp.offset for tp in tps})
        else:
            self.consumer.incremental_assign(tps)

    def _check_reachable(self) -> None:
        for side, admin in (("source", self.topics.source_admin),
                            ("target", self.topics.target_admin)):
            try:
                admin.list_topics(timeout=min(self.timeout, 15))
            except CLIENT_ERRORS as exc:
                raise MirrorError(f"the {side} cluster "
                                  f"({getattr(self, side + '_config')['bootstrap.servers']}) "
                                  f"did not answer: {error_text(exc)}") from None

    def watermarks(self, side: str, topic: str, partition: int) -> tuple[int, int]:
        """(low, high) of a partition on ``side`` ('source' or 'target'), asked now."""
        try:
            # A leader that moved answers NOT_LEADER until the probe's metadata catches up:
            # asked again until the mirror's timeout, as every transient error.
            return self._ask_probe(side, lambda consumer: consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self.timeout, cached=False))
        except CLIENT_ERRORS as exc:
            raise MirrorError(f"watermarks of {side} {topic}[{partition}]: "
                              f"{error_text(exc)}") from None

    def record_at(self, side: str, topic: str, partition: int, offset: int) -> Any:
        """The first record at or after ``offset`` on ``side`` (the source read as the mirror
        reads it, the target read_uncommitted); None at the partition's end; OUT_OF_RANGE
        when the offset is below the log start or above the log end."""
        try:
            return self._ask_probe(side, lambda consumer: first_records(
                consumer, topic, {partition: offset}, self.timeout)[partition])
        except CLIENT_ERRORS as exc:
            raise MirrorError(f"reading {side} {topic}[{partition}] at {offset}: "
                              f"{error_text(exc)}") from None

    def records_between(self, side: str, topic: str, partition: int, start: int,
                        end: int) -> list | None:
        """The records of [start, end) on ``side`` as readers see them (the source as the
        mirror reads it, the target read_committed); None when ``start`` is out of range."""
        consumer = self._probe(side + "-committed" if side == "target" else side)
        out: list = []
        deadline = time.monotonic() + self.timeout
        consumer.assign([TopicPartition(topic, partition, start)])
        try:
            while time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is None:
                    continue
                error = message.error()
                if error is None:
                    if message.offset() >= end:
                        return out
                    out.append(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    return out
                elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                    return None
                else:
                    raise MirrorError(f"reading {side} {topic}[{partition}] from {start}: "
                                      f"{error.str()}")
            raise MirrorError(f"reading {side} {topic}[{partition}] from {start}: no end "
                              f"within {self.timeout:.0f} s")
        finally:
            consumer.unassign()

    def _ask_probe(self, side: str, call: Callable[[Consumer], T]) -> T:
        """``call(probe)`` asked again on transient errors until the mirror's timeout. A probe
        whose metadata lacks a partition the mirror knows (_UNKNOWN_PARTITION) is replaced
        before the next try: librdkafka can keep such a cache entry for a long-lived client
        after a node is killed and comes back (seen on Apache Kafka), and only a fresh
        client's metadata request clears it."""
        def once() -> T:
            try:
                return call(self._probe(side))
            except KafkaException as exc:
                if kafka_error_of(exc).code() == KafkaError._UNKNOWN_PARTITION:
                    self._drop_probe(side)
                raise
        return retry_transient(once, self.timeout)

    def _drop_probe(self, side: str) -> None:
        consumer = self._probes.pop(side, None)
        if consumer is not None:
            consumer.close()

    def _probe(self, side: str) -> Consumer:
        """A consumer for looking at one side (watermarks, single records), kept for the run:
        "source", "target" (read_uncommitted) or "target-committed"."""
        consumer = self._probes.get(side)
        if consumer is None:
            config = self.source_config if side == "source" else self.target_config
            isolation = {"source": self.isolation, "target": "read_uncommitted"}.get(
                side, "read_committed")
            consumer = self._probes[side] = Consumer({
                **config, "group.id": f"kip-mirror-probe-{id(self)}",
                "enable.auto.commit": False, "enable.partition.eof": True,
                "auto.offset.reset": "error", "fetch.wait.max.ms": 10,
                "fetch.error.backoff.ms": 10, "isolation.level": isolation})
        return consumer

    def close_probes(self) -> None:
        for consumer in self._probes.values():
            consumer.close()
        self._probes.clear()

