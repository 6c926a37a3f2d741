"""The two ways a mirror writes the target.

- PreserveWriter (KIP-391): ``produce_arrays(..., offsets=...)``, every record at its source
  offset, idempotent; the resume point is the target partition's log end, so nothing is kept
  anywhere else. Consumer group offsets are copied 1:1 on an interval and at the end (the same
  numbers are valid on the target), never past what the target holds.
- TransactionalWriter (KIP-656): records go into a target transaction with the source offsets
  (``send_offsets_to_transaction`` into the target group ``--group``, keyed by the target
  topic and partition); the resume point is that group's committed offsets. Any error aborts
  the whole transaction and the source is read again from the committed offsets: never a
  partial commit.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from ..clients import OUT_OF_RANGE
from ..engine.group_metadata import GroupMetadata
from ..producer import (
    Producer,
    emulation_of,
    forward_fetched,
    forwards_fetched,
    wait_for_producer_id,
)
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

if TYPE_CHECKING:
    from .fetcher import Fetched

log = logging.getLogger("kipproducer.mirror")

#: Records in one target transaction at the most (a commit also happens every
#: commit_interval_ms).
MAX_TRANSACTION_RECORDS = 200_000
#: A copy caught up with its source commits what it read at once, but transactions at most
#: this often (seconds): a trickle of records does not become a transaction per record.
CAUGHT_UP_COMMIT_S = 0.02
#: Offsets below an emulated target's log end compared with the source when a preserve
#: mirror starts (a killed predecessor's aborted transaction is right at the end).
TAIL_CHECK = 64


def _columns(messages: list) -> tuple[list, list, list, np.ndarray, np.ndarray, int]:
    """values, keys, headers, timestamps, offsets and key + value bytes, in one pass."""
    n = len(messages)
    values: list = [None] * n
    keys: list = [None] * n
    headers: list = [None] * n
    timestamps = np.empty(n, np.int64)
    offsets = np.empty(n, np.int64)
    size = 0
    for i, m in enumerate(messages):
        value, key = m.value(), m.key()
        values[i], keys[i], headers[i] = value, key, m.headers()
        timestamps[i] = m.timestamp()[1]
        offsets[i] = m.offset()
        size += (len(value) if value else 0) + (len(key) if key else 0)
    np.maximum(timestamps, 0, out=timestamps)  # -1: no timestamp
    return values, keys, headers, timestamps, offsets, size


def _content(msg: Any) -> tuple:
    return (msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1])


class MirrorView(Protocol):
    """What a writer reads of the mirror that runs it (mirror/core.py's Mirror is one): its
    settings, its progress and two questions it answers. Writers import nothing of the core,
    so the dependency runs one way: core -> writers."""

    group: str | None
    transactional_id: str | None
    reader_kind: str
    timeout: float
    source_config: dict[str, Any]
    target_config: dict[str, Any]
    commit_interval_s: float
    group_sync_interval_s: float
    metrics: Metrics
    topics: TopicMap
    consumer: Consumer | None
    assigned: dict[tuple[str, int], TopicPair]

    def watermarks(self, side: str, topic: str, partition: int) -> tuple[int, int]: ...

    def record_at(self, side: str, topic: str, partition: int, offset: int) -> Any: ...

    def records_between(self, side: str, topic: str, partition: int, start: int,
                        end: int) -> list | None: ...

    def seek(self, key: tuple[str, int], offset: int) -> None: ...


class Writer:
    def __init__(self, mirror: MirrorView) -> None:
        self.mirror = mirror
        self.metrics = mirror.metrics
        self._marks_read = 0.0  # when _high_watermarks() last looked

    def resume(self, new: list[tuple[TopicPair, int]]) -> dict[tuple[str, int], int]:
        raise NotImplementedError

    def write(self, pair: TopicPair, partition: int, messages: list) -> None:
        raise NotImplementedError

    def forward(self, pair: TopicPair, fetched: Fetched) -> None:
        raise NotImplementedError

    def needs_records(self, pairs: list[TopicPair]) -> bool:
        """Whether these target topics must be written record by record (the consumer
        reader) rather than with whole fetched batches."""
        return False

    def source_position(self, pair: TopicPair, partition: int, offset: int) -> None:
        """The reader met the end of a source partition at ``offset``."""

    def can_forward(self) -> bool:
        """Whether the target producer takes fetched batches (its engine runs the writes;
        a transactional producer whose config keeps librdkafka's transactions does not)."""
        return forwards_fetched(self.producer)

    def _forward_batches(self, pair: TopicPair, fetched: Fetched, *, with_offsets: bool,
                         on_delivery: Any) -> tuple[int, int, int, int]:
        """The fetched batches to the target producer, records as bytes (the fast path);
        returns (records, bytes, last record's source offset, last timestamp)."""
        records = size = 0
        last_offset = last_ts = -1
        for b in fetched.batches:
            queued, last = forward_fetched(
                self.producer, pair.target, fetched.partition, b.records, framed=b.framed,
                count=b.count, base_offset=b.base_offset, base_timestamp=b.base_timestamp,
                max_timestamp=b.max_timestamp, log_append_time=b.log_append_time,
                with_offsets=with_offsets, min_offset=b.min_offset, on_delivery=on_delivery)
            if queued:
                records += queued
                size += len(b.records)
                last_offset = last
                last_ts = b.max_timestamp
        return records, size, last_offset, last_ts

    def maybe_commit(self, caught_up: bool = False) -> None:
        """Called after every read round; ``caught_up``: every source partition was read to
        its end."""
        raise NotImplementedError

    def idle(self) -> bool:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _high_watermarks(self, every_s: float = 1.0) -> None:
        """The source's high watermarks as the source consumer last saw them (for lag)."""
        now = time.monotonic()
        if now - self._marks_read < every_s or self.mirror.consumer is None:
            return  # the fetch reader's answers carry them (Mirror._fetch_round)
        self._marks_read = now
        consumer = self.mirror.consumer
        for (topic, partition), pair in self.mirror.assigned.items():
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                         cached=True)
            except CLIENT_ERRORS:
                continue
            if high is not None and high >= 0:
                self.metrics.partition(topic, pair.target, partition).high_watermark = high


EMULATION_ID = "kip.emulation.transactional.id"


def emulation_id(mirror: MirrorView) -> str:
    """The stable transactional id of a preserve mirror onto a stock target (emulated mode):
    the target config's kip.emulation.transactional.id, else --transactional-id, else one
    derived from --group, else one derived from what names the copy (source servers, topics
    pattern, rename). A restarted mirror gets the same id and so fences its predecessor: the
    dead one's open transaction is aborted, its marker written, before the log end is read."""
    given = mirror.target_config.get(EMULATION_ID) or mirror.transactional_id
    if given:
        return str(given)
    if mirror.group:
        return f"kip-mirror-preserve-{mirror.group}"
    names = "\0".join((str(mirror.source_config.get("bootstrap.servers", "")),
                       mirror.topics.pattern.pattern, mirror.topics.rename))
    return f"kip-mirror-preserve-{hashlib.sha256(names.encode()).hexdigest()[:16]}"


class PreserveWriter(Writer):
    def __init__(self, mirror: MirrorView) -> None:
        super().__init__(mirror)
        self.producer = Producer({"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                  **mirror.target_config,
                                  EMULATION_ID: emulation_id(mirror)})
        self._engine_ready()
        # target topics whose offsets go through the stock-cluster emulation (kip.mode of
        # the target config resolved per topic: docs/stock-clusters.md)
        self.emulated: set[str] = set()
        self.modes: dict[str, str] = {}
        self.errors: list[str] = []
        # (source topic, partition) -> chunks written and not acknowledged yet:
        # [next offset after the chunk, records, bytes, last timestamp]
        self.pending: dict[tuple[str, int], deque] = {}
        self.acked: dict[tuple[str, int], int] = {}  # next offset the target holds
        self.read_to: dict[tuple[str, int], int] = {}  # fetch reader: next source offset
        self.reporters: dict[tuple[str, int], Any] = {}
        self.metered: dict[tuple[str, int], Any] = {}  # partitions with a reporter: metrics
        self.last_sync = time.monotonic()

    def _engine_ready(self) -> None:
        """Wait for the engine's first answer from the target (its producer id): that answer
        says whether runs of offsets may be packed into one batch (docs/protocol.md §9), and the
        first fetched answer appended before it would go out as a batch per run."""
        wait_for_producer_id(self.producer, self.mirror.timeout)

    def target_mode(self, pair: TopicPair) -> str:
        """"native" or "emulated" for the target topic (the capability probe runs first for
        emulated); a target where neither works is refused with the probe's reason."""
        mode = self.modes.get(pair.target)
        if mode is None:
            try:
                mode = self._ask_mode(pair.target)
            except KafkaException as exc:
                raise MirrorError(f"the preserve mode cannot write target topic "
                                  f"{pair.target!r}: {error_text(exc)}") from None
            self.modes[pair.target] = mode
            if mode == "emulated":
                self.emulated.add(pair.target)
        return mode

    def _ask_mode(self, topic: str) -> str:
        """kip_mode(topic), asked again while the broker asked does not know the topic: the
        mirror has just created it or seen it, and on a cluster of several brokers a new
        topic's metadata reaches each broker a moment after the creation is acknowledged."""
        deadline = time.monotonic() + self.mirror.timeout
        while True:
            try:
                return self.producer.kip_mode(topic)
            except KafkaException as exc:
                if (kafka_error_of(exc).code() != KafkaError.UNKNOWN_TOPIC_OR_PART
                        or time.monotonic() > deadline):
                    raise
            time.sleep(0.1)

    def needs_records(self, pairs: list[TopicPair]) -> bool:
        """Whether these target topics take records rather than whole fetched batches: the
        emulation writes records (with fillers and markers for the gaps), so an emulated
        target is read with the consumer reader (docs/mirror.md)."""
        return any(self.target_mode(pair) == "emulated" for pair in pairs)

    def resume(self, new: list[tuple[TopicPair, int]]) -> dict[tuple[str, int], int]:
        """The target's log end: every offset below it is there (KIP-391 writes in order).
        On an emulated target the log end is read after the predecessor is fenced (its open
        transaction aborted and its marker in), and the tail is checked at read_committed."""
        starts = {}
        for pair, p in new:
            if self.target_mode(pair) == "emulated":
                if self.mirror.reader_kind == "fetch":
                    raise MirrorError(
                        f"target topic {pair.target!r} has no KIP-WIRE extension (emulated "
                        "mode) and the fetch reader forwards whole batches, which needs it; "
                        "run the mirror again (it then reads with the consumer) or pass "
                        "--reader consumer")
                try:
                    target_end = emulation_of(self.producer).log_end(pair.target, p)
                except KafkaException as exc:
                    raise MirrorError(f"log end of target {pair.target}[{p}]: "
                                      f"{error_text(exc)}") from None
                source_low, _ = self.mirror.watermarks("source", pair.source, p)
                if target_end > 0:
                    self._check_emulated_tail(pair, p, target_end)
                starts[(pair.source, p)] = max(target_end, source_low)
                self.acked[(pair.source, p)] = target_end
                continue
            _, target_end = self.mirror.watermarks("target", pair.target, p)
            source_low, _ = self.mirror.watermarks("source", pair.source, p)
            if target_end > 0:
                self._check_copy(pair, p, target_end)
            starts[(pair.source, p)] = max(target_end, source_low)
            self.acked[(pair.source, p)] = target_end
        return starts

    def _check_copy(self, pair: TopicPair, p: int, target_end: int) -> None:
        """A target partition that already holds records must be a copy of the source: its
        last record is the source's record at that offset. (The source's own end offset is
        not asked: some brokers answer ListOffsets wrongly, Tansu among them.)"""
        last = self.mirror.record_at("target", pair.target, p, target_end - 1)
        if last is None or last is OUT_OF_RANGE:
            return  # no record at the end (it was trimmed): nothing to compare
        there = self.mirror.record_at("source", pair.source, p, last.offset())
        refuse = None
        if there is OUT_OF_RANGE:
            if last.offset() >= self.mirror.watermarks("source", pair.source, p)[0]:
                refuse = f"it ends at offset {target_end}, beyond the source's last record"
            else:
                log.warning("target %s[%d]: the source's log starts after offset %d now; "
                            "the copy is not checked", pair.target, p, last.offset())
        elif there is None:
            refuse = f"it ends at offset {target_end}, beyond the source's last record"
        elif there.offset() == last.offset() and _content(there) != _content(last):
            refuse = (f"its record at offset {last.offset()} differs from the source's "
                      "record there")
        elif there.offset() != last.offset():
            log.warning("target %s[%d]: the source no longer has offset %d (compacted or "
                        "trimmed since it was copied); the copy is not checked", pair.target,
                        p, last.offset())
        if refuse:
            raise MirrorError(
                f"target {pair.target}[{p}] is not a copy of the source {pair.source}[{p}]: "
                f"{refuse}. The preserve mode never writes below a target's log end; delete "
                "the target topic or mirror to another name (--rename)")

    def _check_emulated_tail(self, pair: TopicPair, p: int, target_end: int) -> None:
        """The last TAIL_CHECK offsets of an emulated target against the source, both as
        readers see them (read_committed on the target): the same records at the same
        offsets. A mirror killed inside a transaction that held source records (the run
        before a gap of one offset, whose commit marker fills it) has had them aborted by
        the fence: offsets that can never be written again, so the copy is refused loudly
        rather than resumed past a hole."""
        start = max(0, target_end - TAIL_CHECK,
                    self.mirror.watermarks("target", pair.target, p)[0])
        theirs = self.mirror.records_between("source", pair.source, p, start, target_end)
        ours = self.mirror.records_between("target", pair.target, p, start, target_end)
        if theirs is None or ours is None:
            return  # a log start moved under the check: nothing to compare
        if [(m.offset(), _content(m)) for m in theirs] == [(m.offset(), _content(m))
                                                           for m in ours]:
            return
        mine = {m.offset() for m in ours}
        missing = [m.offset() for m in theirs if m.offset() not in mine]
        what = (f"the source's records at offsets {missing[:5]} are not committed there"
                if missing else "its records differ from the source's there")
        raise MirrorError(
            f"target {pair.target}[{p}] is not a copy of the source {pair.source}[{p}] below "
            f"its log end {target_end}: {what}. Another writer has appended to the target "
            "topic (on a stock target the emulation keeps offsets only while every writer "
            "of the topic follows it, docs/stock-clusters.md); those offsets cannot be "
            "written again: delete the target topic or mirror to another name (--rename)")

    def source_position(self, pair: TopicPair, partition: int, offset: int) -> None:
        """The reader met the source's end at ``offset`` (past markers and aborted records):
        on an emulated target, the held run is written and the log padded to ``offset``, so
        the copy is visible now and ends where the source does."""
        if pair.target not in self.emulated:
            return
        if emulation_of(self.producer).pad_to(pair.target, partition, offset):
            # the target holds the partition up to ``offset`` (no record reports the filled
            # tail): a source log start moved up to its end can be copied (sync_log_starts)
            key = (pair.source, partition)
            self.acked[key] = max(self.acked.get(key, 0), offset)

    def write(self, pair: TopicPair, partition: int, messages: list) -> None:
        key = (pair.source, partition)
        values, keys, headers, timestamps, offsets, size = _columns(messages)
        next_offset = int(offsets[-1]) + 1
        self.pending.setdefault(key, deque()).append(
            [next_offset, len(messages), size, int(timestamps[-1])])
        self.producer.produce_arrays(pair.target, values, keys=keys, headers=headers,
                                     timestamps=timestamps, partition=partition,
                                     offsets=offsets, on_delivery=self._reporter(pair, partition))

    def forward(self, pair: TopicPair, fetched: Fetched) -> None:
        key = (pair.source, fetched.partition)
        m = self.metrics.partition(pair.source, pair.target, fetched.partition)
        chunks = self.pending.setdefault(key, deque())
        # Reports may come while the batches are appended (a full queue is served): the
        # chunk is in place first, its end unknown (None) until the append is done.
        chunk: list = [None, 0, 0, -1]
        chunks.append(chunk)
        records, size, last_offset, last_ts = self._forward_batches(
            pair, fetched, with_offsets=True, on_delivery=self._reporter(pair, fetched.partition))
        if records:
            chunk[:] = [last_offset + 1, records, size, last_ts]
        else:
            chunks.pop()
        # Where the source's next record is (past markers, aborted records, compacted gaps):
        # the partition's next offset once everything before it is acknowledged.
        self.read_to[key] = fetched.next_offset
        self._settle(key, m)

    def _settle(self, key: tuple[str, int], m: Any) -> None:
        """Chunks the target acknowledged, counted in the metrics."""
        chunks = self.pending[key]
        end = self.acked.get(key, 0)
        while chunks and chunks[0][0] is not None and chunks[0][0] <= end:
            nxt, records, nbytes, ts = chunks.popleft()
            self.metrics.copied(m, records, nbytes, ts, nxt)
        if not chunks and key in self.read_to:
            m.next_offset = max(m.next_offset, self.read_to[key])

    def _reporter(self, pair: TopicPair, partition: int) -> Any:
        """The delivery callback of a target partition (one per partition, kept). It only
        notes how far the target holds the partition (a report per run of offsets: many per
        round on a compacted source); _settle_all() counts the chunks once per round."""
        key = (pair.source, partition)
        found = self.reporters.get(key)
        if found is not None:
            return found
        acked = self.acked
        self.metered[key] = self.metrics.partition(pair.source, pair.target, partition)

        def delivered(err: KafkaError | None, report: Any) -> None:
            if err is not None:
                self._failed(pair, partition, err)
                return
            end = report.offset() + report.count
            if end > acked.get(key, 0):
                acked[key] = end

        self.reporters[key] = delivered
        return delivered

    def _settle_all(self) -> None:
        for key, m in self.metered.items():
            if self.pending.get(key):
                self._settle(key, m)

    def _failed(self, pair: TopicPair, partition: int, err: KafkaError) -> None:
        where = f"{pair.target}[{partition}]"
        if err.code() == 10391 or "INVALID_PRODUCE_OFFSET" in err.str():
            log_end = getattr(err, "log_end_offset", None)
            self.errors.append(
                f"the target {where} refused records below its log end"
                + (f" ({log_end})" if log_end is not None else "")
                + ": another writer wrote to it while the mirror ran; stop that writer "
                "(a preserve mirror must be the target's only writer)")
        else:
            self.errors.append(f"writing {where}: {err.str()}")

    def maybe_commit(self, caught_up: bool = False) -> None:
        self.producer.poll(0)
        if self.errors:
            raise MirrorError(self.errors[0])
        self._settle_all()
        self._high_watermarks()
        if time.monotonic() - self.last_sync >= self.mirror.group_sync_interval_s:
            self.sync_log_starts()
            self.sync_group_offsets()

    def idle(self) -> bool:
        self._settle_all()
        return not any(self.pending.values())

    def finish(self) -> None:
        left = self.producer.flush(self.mirror.timeout)
        if self.errors:
            raise MirrorError(self.errors[0])
        if left:
            raise MirrorError(f"{left} records not acknowledged by the target within "
                              f"{self.mirror.timeout:.0f} s; run again to resume")
        self._settle_all()
        self._high_watermarks(0)
        self.sync_log_starts()
        self.sync_group_offsets()

    def close(self) -> None:
        self.producer.close()

    # ---- log starts and consumer group offsets, copied 1:1 --------------------------------

    def sync_log_starts(self) -> None:
        """A source log start moved up (retention, DeleteRecords): the target's too, once the
        target holds that offset, so both answer the same earliest offset."""
        moves = []
        for (topic, p), pair in self.mirror.assigned.items():
            source_low, _ = self.mirror.watermarks("source", topic, p)
            target_low, _ = self.mirror.watermarks("target", pair.target, p)
            if target_low < source_low <= self.acked.get((topic, p), 0):
                moves.append(TopicPartition(pair.target, p, source_low))
        if not moves:
            return
        futures = self.mirror.topics.target_admin.delete_records(
            moves, request_timeout=self.mirror.timeout)
        for tp, future in futures.items():
            try:
                future.result()
            except CLIENT_ERRORS as exc:
                log.warning("log start of target %s[%d] not moved to %d: %s", tp.topic,
                            tp.partition, tp.offset, error_text(exc))


    def sync_group_offsets(self) -> None:
        """Every source group's committed offsets of the mirrored topics, to the same group on
        the target, capped at what the target holds (a consumer that fails over resumes at
        the same records, and never past the copy)."""
        self.last_sync = time.monotonic()
        source_admin = self.mirror.topics.source_admin
        target_admin = self.mirror.topics.target_admin
        try:
            listed = source_admin.list_consumer_groups(
                request_timeout=self.mirror.timeout).result()
        except CLIENT_ERRORS as exc:
            log.warning("source groups not listed: %s", error_text(exc))
            return
        pairs = {pair.source: pair for pair in self.mirror.topics.pairs.values()}
        for group in listed.valid:
            name = group.group_id
            if name.startswith("kip-mirror-"):
                continue
            try:
                request = [ConsumerGroupTopicPartitions(name)]
                result = source_admin.list_consumer_group_offsets(request)[name].result()
            except CLIENT_ERRORS as exc:
                log.info("offsets of source group %s not read: %s", name, error_text(exc))
                continue
            offsets = []
            for tp in result.topic_partitions or []:
                pair = pairs.get(tp.topic)
                if pair is None or tp.offset < 0 or tp.error is not None:
                    continue
                held = self.acked.get((tp.topic, tp.partition), 0)
                # (confluent's TopicPartition takes no metadata=None: a group that committed
                # none gets none)
                extra = {} if tp.metadata is None else {"metadata": tp.metadata}
                offsets.append(TopicPartition(pair.target, tp.partition,
                                              min(tp.offset, held), **extra))
            if not offsets:
                continue
            try:
                target_admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(name, offsets)])[name].result()
            except CLIENT_ERRORS as exc:
                # Kafka refuses while the group has members on the target (it is in use
                # there: the target's own commits win).
                log.info("offsets of group %s not copied to the target: %s", name,
                         error_text(exc))


class TransactionalWriter(Writer):
    def __init__(self, mirror: MirrorView) -> None:
        super().__init__(mirror)
        self.group = mirror.group
        self.producer = Producer({"linger.ms": 5, **mirror.target_config,
                                  "transactional.id": mirror.transactional_id})
        try:
            # Fences an earlier instance with the same transactional.id and aborts its open
            # transaction: the target's last stable offsets move on at once.
            self.producer.init_transactions(mirror.timeout)
        except CLIENT_ERRORS as exc:
            raise MirrorError(f"the target refused the transactional producer "
                              f"{mirror.transactional_id!r}: {error_text(exc)}") from None
        self.in_transaction = False
        self.began = 0.0
        self.records = 0
        # source (topic, partition) -> the next offset after what this transaction holds
        self.next: dict[tuple[str, int], int] = {}
        # ... and what the last commit left committed
        self.committed: dict[tuple[str, int], int] = {}
        self.chunks: dict[tuple[str, int], list] = {}
        self.failed: list[KafkaError] = []
        self.aborted = False  # the last transaction was aborted (its records are read again)

    def _group_consumer(self, side: str) -> Consumer:
        config = self.mirror.source_config if side == "source" else self.mirror.target_config
        return Consumer({**config, "group.id": self.group, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})

    def resume(self, new: list[tuple[TopicPair, int]]) -> dict[tuple[str, int], int]:
        """The target group's offsets (require_stable: a pending transaction is waited out);
        where they are missing or behind the source's group of the same id, the source
        group's offsets, copied to the target group first (a one-time sync)."""
        target = self._group_consumer("target")
        source = self._group_consumer("source")
        try:
            # a group coordinator that is loading or moving (a new cluster's offsets topic
            # just created, say) answers NOT_COORDINATOR: asked again, as every transient error
            there = retry_transient(lambda: target.committed(
                [TopicPartition(pair.target, p) for pair, p in new],
                timeout=self.mirror.timeout), self.mirror.timeout)
            here = retry_transient(lambda: source.committed(
                [TopicPartition(pair.source, p) for pair, p in new],
                timeout=self.mirror.timeout), self.mirror.timeout)
            starts = {}
            synced = []
            for (pair, p), t, s in zip(new, there, here, strict=True):
                if t.error is not None:
                    raise MirrorError(f"offsets of group {self.group!r} on the target: "
                                      f"{t.error.str()}")
                start = t.offset if t.offset >= 0 else -1
                if s.error is None and s.offset > start:
                    start = s.offset
                    synced.append(TopicPartition(pair.target, p, start))
                if start < 0:
                    start = self.mirror.watermarks("source", pair.source, p)[0]
                starts[(pair.source, p)] = start
                self.committed[(pair.source, p)] = start
            if synced:
                log.info("group %s: source offsets copied to the target first: %s",
                         self.group, synced)
                retry_transient(lambda: target.commit(offsets=synced, asynchronous=False),
                                self.mirror.timeout)
            return starts
        except CLIENT_ERRORS as exc:
            raise MirrorError(f"offsets of group {self.group!r}: {error_text(exc)}") from None
        finally:
            target.close()
            source.close()

    def write(self, pair: TopicPair, partition: int, messages: list) -> None:
        key = (pair.source, partition)
        if not self.in_transaction:
            self.producer.begin_transaction()
            self.in_transaction = True
            self.began = time.monotonic()
        values, keys, headers, timestamps, _, size = _columns(messages)
        self.producer.produce_arrays(pair.target, values, keys=keys, headers=headers,
                                     timestamps=timestamps, partition=partition,
                                     on_delivery=self._delivered)
        self.next[key] = messages[-1].offset() + 1
        self.records += len(messages)
        self.chunks.setdefault(key, []).append((len(messages), size, int(timestamps[-1])))

    def forward(self, pair: TopicPair, fetched: Fetched) -> None:
        if not fetched.batches:
            return  # nothing to copy (markers, aborted records, the end): no transaction
        key = (pair.source, fetched.partition)
        if not self.in_transaction:
            self.producer.begin_transaction()
            self.in_transaction = True
            self.began = time.monotonic()
        records, size, last_offset, last_ts = self._forward_batches(
            pair, fetched, with_offsets=False, on_delivery=self._delivered)
        if records:
            # The offset after the last record copied, as with the consumer reader (markers
            # and aborted records after it are read again after a restart, and skipped).
            self.next[key] = last_offset + 1
            self.records += records
            self.chunks.setdefault(key, []).append((records, size, last_ts))

    def _delivered(self, err: KafkaError | None, report: Any) -> None:
        if err is not None:
            self.failed.append(err)

    def maybe_commit(self, caught_up: bool = False, *, force: bool = False) -> None:
        self.producer.poll(0)
        if not self.in_transaction:
            return
        # Caught up with the source (a live copy): what was read commits now rather than at
        # the interval, which is for a copy that is behind (fewer, bigger transactions).
        age = time.monotonic() - self.began
        if not force and self.records < MAX_TRANSACTION_RECORDS and \
                age < self.mirror.commit_interval_s and \
                not (caught_up and age >= CAUGHT_UP_COMMIT_S):
            return
        pairs = self.mirror.assigned
        offsets = [TopicPartition(pairs[key].target, key[1], nxt)
                   for key, nxt in sorted(self.next.items())]
        try:
            if self.failed:
                raise KafkaException(self.failed[0])
            if offsets:  # none when the batches read held no record past the position
                self.producer.send_offsets_to_transaction(offsets, GroupMetadata(self.group),
                                                          self.mirror.timeout)
            self.producer.commit_transaction(self.mirror.timeout)
        except CLIENT_ERRORS as exc:
            self._abort(kafka_error_of(exc))
            return
        for key, nxt in self.next.items():
            self.committed[key] = nxt
            m = self.metrics.partition(key[0], pairs[key].target, key[1])
            for records, size, ts in self.chunks.get(key, ()):
                self.metrics.copied(m, records, size, ts, nxt)
        self.metrics.transactions += 1
        self.aborted = False
        self._high_watermarks(0)
        self._reset()

    def _abort(self, error: KafkaError) -> None:
        """The whole transaction again: abort, and read the source again from the offsets
        committed last (never a partial commit)."""
        if error.fatal():
            raise MirrorError(f"the target transaction failed for good: {error.str()} (a "
                              "second mirror with the same transactional id fenced this one?)")
        log.warning("transaction aborted (%s); copying its records again", error.str())
        self.aborted = True
        try:
            self.producer.abort_transaction(self.mirror.timeout)
        except CLIENT_ERRORS as exc:
            if kafka_error_of(exc).fatal():
                raise MirrorError(f"the target transaction could not be aborted: "
                                  f"{error_text(exc)}") from None
            raise
        for key in self.next:
            self.mirror.seek(key, self.committed[key])
        self._reset()

    def _reset(self) -> None:
        self.in_transaction = False
        self.records = 0
        self.next.clear()
        self.chunks.clear()
        self.failed.clear()

    def idle(self) -> bool:
        return not self.in_transaction

    def finish(self) -> None:
        self.maybe_commit(force=True)
        if self.aborted:  # nothing half-done: its records are copied by the next run
            raise MirrorError("the last transaction could not be committed and was aborted; "
                              "run again to resume from the committed offsets")

    def close(self) -> None:
        if self.in_transaction:
            try:
                self.producer.abort_transaction(5)
            except CLIENT_ERRORS:
                pass
        self.producer.close()
