"""Producer groups (KIP-509) and heartbeat positions (KIP-910) on Kafka's own machinery.

A producer group splits ``source.partition.count`` source partitions (tables, files, shards of
an external source) among the Producers that share a ``group.id``, and keeps each source
partition's last committed *position* (a string) so that whoever owns it next resumes there.
Nothing here needs a broker extension (docs/producer-groups.md):

- The **positions topic** (``positions.topic``, default ``__kip_positions_<group.id>``) has one
  partition per source partition, is compacted, and holds no records. It is created on the
  first ``subscribe()`` (CreateTopics), grown with CreatePartitions when
  ``source.partition.count`` is larger; a smaller count is refused.
- Membership is an internal ``confluent_kafka.Consumer`` of that group subscribed to the
  positions topic (cooperative-sticky assignment, heartbeats, static membership with
  ``group.instance.id``): its assigned partitions are the source partitions this member owns.
  Its partitions are paused, so it never fetches.
- A position is a **record** in its partition of the positions topic (key: the source
  partition's number, value: the position string; a tombstone deletes it), and the group's
  **committed offset** of that partition points just past it, with the position string in
  the commit metadata as well: readers take the metadata and fetch the record only from a
  broker that keeps no commit metadata (Tansu). Committed offset 0: deleted (KIP-910 None);
  no committed offset: never committed (None).
- Transactional mode: the position records are produced in the producer's transaction and
  the offsets go through TxnOffsetCommit with the member's generation (KIP-447: a member of
  an older generation is refused, its transaction must abort). At-least-once mode: the
  records are flushed with the data, then OffsetCommit.

The internal consumer's callbacks run only inside ``consumer.poll()``, which this module calls
from the producer's own calls (``subscribe``, ``alive``, ``commit_*``, the produce paths), so
the application's ``on_assign`` / ``on_revoke`` / ``on_lost`` run in its own thread, never
concurrently with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from . import client_config
from .client_config import ConfigError
from .clients import OUT_OF_RANGE, connection_properties, first_records
from .engine.transactions import TxnState

log = logging.getLogger("kipproducer.groups")

#: Properties only producer groups know (their presence turns group mode on; all need
#: ``group.id`` and ``source.partition.count``), with their defaults (client_config.py's table).
GROUP_PROPERTIES: dict[str, Any] = client_config.defaults(client_config.GROUP)
#: Consumer properties a group member passes to its internal consumer (not to the producer).
MEMBER_PROPERTIES: dict[str, Any] = client_config.defaults(client_config.MEMBER)
POSITIONS_TOPIC_PREFIX = "__kip_positions_"
#: Kafka's default offset.metadata.max.bytes: the longest position (UTF-8 bytes).
MAX_POSITION_BYTES = 4096
#: The committed offset of a deleted position; an offset > 0 points just past the position's
#: record (docs/producer-groups.md, "Storage format").
DELETED = 0
# Commit errors that mean "ask again once the membership settles".
_COMMIT_RETRY = (KafkaError._WAIT_COORD,
                 KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT)
_FENCED_CODES = (KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                 KafkaError.FENCED_INSTANCE_ID)
# A live member whose generation is older than the group's (a rebalance it has not joined yet).
_STALE_GENERATION = (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS)
# Between two polls of the internal consumer from the produce paths (they are hot).
_TICK_S = 0.05


# Fenced for good: another producer took this transactional.id (librdkafka's _FENCED, the
# broker's PRODUCER_FENCED), or another member this group.instance.id. librdkafka makes both
# fatal; so is every error of ours that wraps one, so that ``error.fatal()`` tells the caller
# to stop (abort_transaction() cannot help). ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID stay
# abortable: a member that missed a rebalance aborts and goes on with what it owns (KIP-447).
_FATAL_FENCING = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                  KafkaError.FENCED_INSTANCE_ID)


def _error(code: int, text: str, **flags: Any) -> KafkaException:
    if code in _FATAL_FENCING or flags.get("fatal"):
        flags.update(fatal=True, retriable=False, txn_requires_abort=False)
    return KafkaException(KafkaError(code, text, **flags))


def split_config(conf: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(what librdkafka's producer gets, the group settings or None without group mode).

    Group mode is on when any of GROUP_PROPERTIES is given; then ``group.id`` and
    ``source.partition.count`` are required and MEMBER_PROPERTIES are kept from librdkafka's
    producer too. Without them the config is returned unchanged (as before groups existed)."""
    if not any(name in conf for name in GROUP_PROPERTIES):
        return dict(conf), None
    settings = {**MEMBER_PROPERTIES, **GROUP_PROPERTIES}
    producer_conf = {}
    for name, value in conf.items():
        if name in settings:
            settings[name] = value
        else:
            producer_conf[name] = value
    group_id = settings["group.id"]
    if not group_id or not isinstance(group_id, str):
        raise ConfigError("producer groups (source.partition.count, max.alive.interval.ms, "
                          "positions.*, update_offsets_cb) need group.id")
    if settings["source.partition.count"] is None:
        raise ConfigError("source.partition.count=None: a producer group needs a number of "
                          "source partitions >= 1")
    for name in ("source.partition.count", "max.alive.interval.ms",
                 "positions.commit.interval.ms", "session.timeout.ms",
                 "positions.commit.timeout.ms", "update_offsets_cb"):
        settings[name] = client_config.parse(name, settings[name])
    if settings["max.alive.interval.ms"] < settings["session.timeout.ms"]:
        raise ConfigError(f"max.alive.interval.ms={settings['max.alive.interval.ms']} must be "
                          f">= session.timeout.ms={settings['session.timeout.ms']} (it is the "
                          "internal consumer's max.poll.interval.ms)")
    if not settings["positions.topic"]:
        settings["positions.topic"] = POSITIONS_TOPIC_PREFIX + group_id
    return producer_conf, settings


def check_position(partition: Any, position: Any, what: str) -> None:
    if position is not None and not isinstance(position, str):
        raise _error(KafkaError._INVALID_ARG, f"{what}: the position of source partition "
                     f"{partition} must be a str or None, not {type(position).__name__}")
    if position is None:
        return
    if not position:
        raise _error(KafkaError._INVALID_ARG, f"{what}: the position of source partition "
                     f"{partition} is empty; a position is a non-empty str (None deletes it)")
    if "\0" in position:
        raise _error(KafkaError._INVALID_ARG, f"{what}: the position of source partition "
                     f"{partition} contains a NUL character, which commit metadata cannot "
                     "carry through librdkafka")
    size = len(position.encode()) + 1  # librdkafka sends the C string with its NUL
    if size > MAX_POSITION_BYTES:
        raise _error(KafkaError._INVALID_ARG, f"{what}: the position of source partition "
                     f"{partition} is {size - 1} bytes; a position is stored as offset "
                     "commit metadata, which the broker limits to offset.metadata.max.bytes "
                     f"({MAX_POSITION_BYTES} by default, the NUL librdkafka adds included): "
                     f"at most {MAX_POSITION_BYTES - 1} bytes")


class GroupProducer(Protocol):
    """What a member uses of its producer (kipproducer.Producer, which builds the group: the
    dependency runs from producer.py to this module only). The producer is also what the
    application's callbacks get."""

    def produce(self, topic: str, value: Any = None, key: Any = None, *args: Any,
                **kwargs: Any) -> None: ...

    def flush(self, timeout: float | None = None) -> int: ...

    def poll(self, timeout: float | None = None) -> int: ...

    def begin_transaction(self) -> None: ...

    def abort_transaction(self, *args: Any, **kwargs: Any) -> None: ...

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, *args: Any,
                                    **kwargs: Any) -> None: ...


@dataclass(frozen=True)
class MemberTransactions:
    """The producer's transactions as its group sees them (the producer hands them over when
    it builds the group)."""

    #: The engine's transaction state; None when the producer runs no engine transactions
    #: (no transactional.id, or librdkafka keeps them).
    state: Callable[[], TxnState | None]
    #: Commits the open transaction as it is (commit_transaction without the group's
    #: positions, which the caller has added already).
    commit: Callable[[], None]


class ProducerGroup:
    """One member of a producer group: the internal consumer and the owned positions."""

    def __init__(self, producer: GroupProducer, transactions: MemberTransactions,
                 conf: Mapping[str, Any], settings: dict[str, Any]) -> None:
        self.producer = producer
        self.transactions = transactions
        self.conf = conf
        self.settings = settings
        self.group_id: str = settings["group.id"]
        self.topic: str = settings["positions.topic"]
        self.count: int = settings["source.partition.count"]
        self.max_alive_s = settings["max.alive.interval.ms"] / 1000
        self.commit_interval_s = settings["positions.commit.interval.ms"] / 1000
        self.io_timeout_s = settings["positions.commit.timeout.ms"] / 1000
        self.hook: Callable | None = settings["update_offsets_cb"]
        self.consumer: Consumer | None = None
        self.callbacks: tuple[Callable | None, Callable | None, Callable | None] = (None,) * 3
        # source partition -> last committed (or read) position, for the owned partitions
        self.positions: dict[int, str | None] = {}
        self.assigned_once = False
        self._polling = False
        self._last_poll = 0.0
        self._last_commit = 0.0
        self._closed = False
        self._writing = False  # producing position records: the produce paths do not tick
        self._unread: set[int] = set()  # assigned, positions not read yet
        # While a commit waits out a stale generation: lost partitions not reported yet.
        self._holding: dict[int, str | None] | None = None

    # ---- joining ------------------------------------------------------------------------------

    def subscribe(self, on_assign, on_revoke, on_lost, timeout: float | None) -> dict:
        if self.consumer is not None:
            raise _error(KafkaError._STATE, "subscribe() was called already: this producer "
                         f"is a member of group {self.group_id!r}")
        for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke),
                         ("on_lost", on_lost)):
            if cb is not None and not callable(cb):
                raise TypeError(f"{name} must be callable")
        self.callbacks = (on_assign, on_revoke, on_lost)
        wait = self.io_timeout_s if timeout is None or timeout < 0 else timeout
        deadline = time.monotonic() + wait
        self._ensure_topic(wait)
        self._join()
        while not self.assigned_once:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _error(KafkaError._TIMED_OUT, f"group {self.group_id!r}: no assignment "
                             f"within {wait:.0f} s (is the group coordinator reachable?)",
                             retriable=True)
            self.poll(min(0.1, left))
        return dict(self.positions)

    def _ensure_topic(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

        admin = AdminClient(connection_properties(self.conf))
        # Created first, described after: a Metadata request for a missing topic may create
        # it with the broker's default partition count (auto-creation, Tansu does).
        future = admin.create_topics([NewTopic(
            self.topic, num_partitions=self.count, replication_factor=-1,
            config={"cleanup.policy": "compact"})],
            operation_timeout=timeout, request_timeout=timeout)[self.topic]
        try:
            future.result()
            log.info("created positions topic %s (%d partitions)", self.topic, self.count)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS and \
                    not self._has_topic(admin, timeout):
                raise _error(exc.args[0].code(), f"could not create positions topic "
                             f"{self.topic!r}: {exc.args[0].str()}") from None
        for _attempt in range(5):
            meta = admin.list_topics(self.topic, timeout=timeout)
            topic = meta.topics.get(self.topic)
            have = len(topic.partitions) if topic is not None and topic.error is None else 0
            if have == self.count:
                return
            if have > self.count:
                raise _error(KafkaError._INVALID_ARG, f"positions topic {self.topic!r} has "
                             f"{have} partitions but source.partition.count={self.count}: "
                             "source partitions cannot be removed (a position would be "
                             "lost); use the topic's count or another positions.topic")
            if have == 0:
                future = admin.create_topics([NewTopic(
                    self.topic, num_partitions=self.count, replication_factor=-1,
                    config={"cleanup.policy": "compact"})],
                    operation_timeout=timeout, request_timeout=timeout)[self.topic]
                action = f"create positions topic {self.topic!r} ({self.count} partitions)"
            else:
                log.info("growing positions topic %s from %d to %d partitions", self.topic,
                         have, self.count)
                future = admin.create_partitions([NewPartitions(self.topic, self.count)],
                                                 operation_timeout=timeout,
                                                 request_timeout=timeout)[self.topic]
                action = (f"grow positions topic {self.topic!r} from {have} to "
                          f"{self.count} partitions")
            try:
                future.result()
            except KafkaException as exc:
                code = exc.args[0].code()
                if code in (KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.INVALID_PARTITIONS):
                    continue  # another member did it first: look again
                raise _error(code, f"could not {action}: {exc.args[0].str()}") from None
            time.sleep(0.05 * (_attempt + 1))
        raise _error(KafkaError._FAIL, f"positions topic {self.topic!r}: its partition count "
                     f"did not settle to {self.count}")

    def _has_topic(self, admin: Any, timeout: float) -> bool:
        """Whether the positions topic exists with exactly the group's partition count: then a
        CreateTopics the cluster refuses (no admin API, no permission to create) is no
        matter, the topic was created beforehand."""
        try:
            topic = admin.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        except KafkaException:
            return False
        return (topic is not None and topic.error is None
                and len(topic.partitions) == self.count)

    def _join(self) -> None:
        s = self.settings
        session = s["session.timeout.ms"]
        heartbeat = s["heartbeat.interval.ms"] or max(100, min(3000, session // 10))
        conf = {**connection_properties(self.conf), "group.id": self.group_id,
                "session.timeout.ms": session, "heartbeat.interval.ms": heartbeat,
                "max.poll.interval.ms": s["max.alive.interval.ms"],
                "partition.assignment.strategy": "cooperative-sticky",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "latest", "isolation.level": "read_committed",
                "enable.partition.eof": False}
        if s["group.instance.id"]:
            conf["group.instance.id"] = s["group.instance.id"]
        self.consumer = Consumer(conf)
        self.consumer.subscribe([self.topic], on_assign=self._assigned,
                                on_revoke=self._revoked, on_lost=self._lost)
        self._last_poll = time.monotonic()

    # ---- serving the internal consumer --------------------------------------------------------

    def poll(self, timeout: float = 0) -> None:
        """Serve the internal consumer (its callbacks run here, in the caller's thread)."""
        consumer = self.consumer
        if consumer is None or self._polling or self._closed:
            return
        now = time.monotonic()
        if self.positions and now - self._last_poll > self.max_alive_s:
            # librdkafka has left the group for us (max.poll.interval.ms): whatever we owned
            # is someone else's now. librdkafka does not always say so (a rebalance callback
            # still pending when it left), so the member starts over with a new consumer.
            self._restart(f"no call for {now - self._last_poll:.1f} s > "
                          f"max.alive.interval.ms ({self.max_alive_s * 1000:.0f})")
            return
        self._polling = True
        try:
            if self._unread:
                self._read_unread(consumer)
            message = consumer.poll(timeout)
            self._last_poll = time.monotonic()
        finally:
            self._polling = False
        if message is not None and message.error() is not None:
            code = message.error().code()
            if code == KafkaError._MAX_POLL_EXCEEDED:
                self._restart(message.error().str())
            elif message.error().fatal():
                raise KafkaException(message.error())
            else:
                log.warning("group %s: %s", self.group_id, message.error().str())

    def tick(self) -> None:
        """From the produce paths: serve the consumer now and then, and the periodic commit."""
        if not self._writing and time.monotonic() - self._last_poll >= _TICK_S:
            self.poll(0)
            self.periodic_commit()

    def _restart(self, reason: str) -> None:
        lost = sorted(self.positions)
        log.warning("group %s: partitions %s lost (%s); joining again", self.group_id, lost,
                    reason)
        self.positions.clear()
        self._unread.clear()
        old, self.consumer = self.consumer, None
        self._polling = True  # the old consumer's callbacks are not the application's now
        try:
            if old is not None:
                old.close()
        except KafkaException as exc:
            log.info("closing the old member: %s", exc)
        finally:
            self._polling = False
        self._join()
        if lost and self.callbacks[2] is not None:
            self.callbacks[2](self.producer, lost)
        elif lost and self.callbacks[1] is not None:
            self.callbacks[1](self.producer, lost)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)  # the positions topic is never read
        if self._closed or consumer is not self.consumer:
            return
        self._unread.update(tp.partition for tp in partitions)
        self._read_unread(consumer)
        self.assigned_once = True

    def _read_unread(self, consumer: Consumer) -> None:
        """Take the assigned partitions whose positions are not read yet. When reading fails
        (a timeout: an old owner's transaction still holds them), the error goes to the
        caller and the next poll tries again: a partition is owned only with its position."""
        if not self._unread:
            return
        new = self._read_positions(consumer, sorted(self._unread))
        self._unread.clear()
        self.positions.update(new)
        self._last_commit = time.monotonic()
        if self._holding:
            # Held partitions given back unchanged: the application never lost them.
            for p in list(new):
                if p in self._holding and self._holding[p] == new[p]:
                    del self._holding[p]
                    del new[p]
        if new and self.callbacks[0] is not None:
            self.callbacks[0](self.producer, dict(new))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._gone(consumer, partitions, self.callbacks[1])

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._holding is not None and consumer is self.consumer:
            for tp in partitions:  # see _await_generation
                if tp.partition in self.positions:
                    self._holding[tp.partition] = self.positions.pop(tp.partition)
                self._unread.discard(tp.partition)
            return
        self._gone(consumer, partitions, self.callbacks[2] or self.callbacks[1])

    def _gone(self, consumer, partitions, callback) -> None:
        if self._closed and consumer is not self.consumer:
            return
        self._unread.difference_update(tp.partition for tp in partitions)
        gone = sorted(tp.partition for tp in partitions if tp.partition in self.positions)
        try:
            if gone and callback is not None and consumer is self.consumer:
                callback(self.producer, gone)  # the member still owns them during the call
        finally:
            for p in gone:
                self.positions.pop(p, None)

    def _read_positions(self, consumer: Consumer, partitions: list[int]) -> dict:
        if not partitions:
            return {}
        committed = consumer.committed([TopicPartition(self.topic, p) for p in partitions],
                                       timeout=self.io_timeout_s)
        out: dict[int, str | None] = {}
        in_records: dict[int, int] = {}
        for tp in committed:
            if tp.error is not None:
                raise KafkaException(tp.error)
            if tp.offset > DELETED and tp.metadata:
                out[tp.partition] = tp.metadata
            elif tp.offset > DELETED:
                in_records[tp.partition] = tp.offset - 1  # the broker kept no metadata
            else:
                out[tp.partition] = None
        if in_records:
            out.update(self._read_records(in_records))
        return out

    def _read_records(self, at: Mapping[int, int]) -> dict[int, str | None]:
        """Positions from their records, for a broker that keeps no commit metadata: the
        record at each offset or, if compaction removed it, the first one after it (a later
        position of the same partition whose data was flushed before it was written); none:
        None."""
        reader = Consumer({**connection_properties(self.conf), "group.id": self.group_id,
                           "enable.auto.commit": False, "isolation.level": "read_committed",
                           "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        try:
            found = first_records(reader, self.topic, at, self.io_timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            raise _error(error.code(), f"group {self.group_id!r}: reading the position "
                         f"records of source partitions {sorted(at)}: {error.str()}",
                         retriable=error.retriable()) from None
        finally:
            reader.close()
        positions: dict[int, str | None] = {}
        for p, msg in found.items():
            value = None if msg is None or msg is OUT_OF_RANGE else msg.value()
            positions[p] = None if value is None else value.decode()
        return positions

    # ---- committing ---------------------------------------------------------------------------

    def owned(self) -> list[int]:
        return sorted(self.positions)

    def require_member(self) -> Consumer:
        """The internal consumer; KafkaException(_STATE) before subscribe()."""
        if self.consumer is None:
            raise _error(KafkaError._STATE, "call subscribe() first: this producer is not a "
                         f"member of group {self.group_id!r} yet")
        return self.consumer

    def check_owned(self, positions: Mapping, what: str) -> dict[int, str | None]:
        """``positions`` checked: {owned source partition: position str or None};
        KafkaException(_INVALID_ARG) naming what is wrong (``what``: the call)."""
        if positions is None:
            return {}
        if not isinstance(positions, Mapping):
            raise _error(KafkaError._INVALID_ARG, f"{what}: positions must be a dict "
                         "{source partition: position str or None}, not "
                         f"{type(positions).__name__}")
        out: dict[int, str | None] = {}
        for partition, position in positions.items():
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise _error(KafkaError._INVALID_ARG, f"{what}: source partition "
                             f"{partition!r} is not an int")
            if partition not in self.positions:
                why = ("it does not exist" if not 0 <= partition < self.count else
                       "it is not owned by this member")
                raise _error(KafkaError._INVALID_ARG, f"{what}: source partition {partition} "
                             f"of group {self.group_id!r}: {why} (owned: {self.owned()})")
            check_position(partition, position, what)
            out[partition] = position
        return out

    def prepare(self, positions: Mapping | None, what: str) -> dict[int, str | None]:
        """The positions to commit: ``positions`` (checked), then the KIP-910 hook's."""
        self.require_member()
        self.poll(0)
        updates = self.check_owned(positions, what)
        if self.hook is not None:
            proposed = {**self.positions, **updates}
            returned = self.hook(dict(proposed))
            if returned is not None:
                if not isinstance(returned, Mapping):
                    raise _error(KafkaError._INVALID_ARG, "update_offsets_cb must return a "
                                 "dict {source partition: position str or None} or None, not "
                                 f"{type(returned).__name__}")
                updates.update(self.check_owned(returned, "update_offsets_cb"))
        return updates

    def write_records(self, updates: Mapping[int, str | None]) -> dict[int, Any]:
        """Produce each position's record (a tombstone for None) to its partition of the
        positions topic, through the producer's own path (the transaction's, in transactional
        mode). Returns {partition: offset or KafkaError}, filled by the delivery reports the
        caller's flush serves; ``offsets()`` turns it into the commit."""
        delivered: dict[int, Any] = {}

        def report(err: KafkaError | None, msg: Any) -> None:
            delivered[msg.partition()] = err if err is not None else msg.offset()

        self._writing = True
        try:
            for p, pos in sorted(updates.items()):
                self.producer.produce(self.topic, None if pos is None else pos.encode(),
                                      str(p).encode(), partition=p, on_delivery=report)
        finally:
            self._writing = False
        return delivered

    def offsets(self, updates: Mapping[int, str | None],
                delivered: Mapping[int, Any]) -> list[TopicPartition]:
        """The offsets to commit for ``updates`` whose records were written (write_records),
        or the error that says which record was not."""
        out = []
        for p, pos in sorted(updates.items()):
            outcome = delivered.get(p)
            if outcome is None or isinstance(outcome, KafkaError):
                why = "not delivered in time" if outcome is None else outcome.str()
                code = KafkaError._TIMED_OUT if outcome is None else outcome.code()
                raise _error(code, f"positions of group {self.group_id!r} not committed: the "
                             f"record of source partition {p}'s position in {self.topic!r}: "
                             f"{why}", retriable=outcome is None or outcome.retriable(),
                             txn_requires_abort=self.transactions.state() is not None,
                             fatal=outcome is not None and outcome.fatal())
            out.append(TopicPartition(self.topic, p, outcome + 1 if pos is not None
                                      else DELETED, metadata=pos or ""))
        return out

    def add_to_transaction(self, updates: Mapping[int, str | None],
                           timeout: float | None) -> None:
        """Transactional mode: the position records into the open transaction, flushed so
        that their offsets are known, then the offsets (send_offsets_to_transaction, with the
        member's generation: KIP-447)."""
        producer = self.producer
        delivered = self.write_records(updates)
        producer.flush(-1 if timeout is None else timeout)
        offsets = self.offsets(updates, delivered)
        try:
            producer.send_offsets_to_transaction(offsets, self.group_metadata())
        except KafkaException as exc:
            raise self._positions_error(exc) from None

    def _positions_error(self, exc: KafkaException) -> KafkaException:
        """send_offsets_to_transaction's error, saying what it means for the positions."""
        error = exc.args[0]
        code = error.code()
        self.poll(0)  # a lost assignment's callbacks
        if code in _FENCED_CODES:
            what = ("this member is not in the group's current generation (a zombie: its "
                    "source partitions belong to another member now, KIP-447)")
        else:
            what = "the positions could not be added to the transaction"
        if code in _FATAL_FENCING or error.fatal():
            advice = "this producer can do nothing more: close it"
        else:
            advice = "abort_transaction() and resume from the owned positions"
        return _error(code, f"positions of group {self.group_id!r} not committed: {what}; "
                      f"{advice} ({error.str()})", fatal=error.fatal(),
                      retriable=error.retriable(),
                      txn_requires_abort=error.txn_requires_abort())

    def committed(self, updates: Mapping[int, str | None]) -> None:
        for p, pos in updates.items():
            if p in self.positions:
                self.positions[p] = pos
        self._last_commit = time.monotonic()

    def group_metadata(self) -> Any:
        return self.require_member().consumer_group_metadata()

    def commit_direct(self, updates: Mapping[int, str | None], offsets: list[TopicPartition],
                      timeout: float | None) -> None:
        """OffsetCommit (at-least-once mode, the records written and flushed), retried while
        the membership settles."""
        consumer = self.require_member()
        wait = self.io_timeout_s if timeout is None or timeout < 0 else timeout
        deadline = time.monotonic() + wait
        while True:
            try:
                results = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                error = exc.args[0]
                code = error.code()
                if code in _COMMIT_RETRY and time.monotonic() < deadline:
                    self.poll(0.1)
                    self.check_owned(updates, "commit_positions")
                    consumer = self.require_member()
                    continue
                if (code in _STALE_GENERATION and time.monotonic() < deadline
                        and not self._polling):
                    log.info("commit refused: %s", error.str())
                    # A rebalance moved the generation on before this member heard of it
                    # (cooperative: it keeps its partitions). librdkafka may call that a lost
                    # assignment and rejoin: hold the "lost" partitions back from the
                    # application until the new assignment shows whether they stay here.
                    self._await_generation(consumer, updates, deadline)
                    self.check_owned(updates, "commit_positions")
                    consumer = self.require_member()
                    continue
                if code in _FENCED_CODES or code in _STALE_GENERATION:
                    inside = self._polling
                    self.poll(0)
                    raise _error(code, f"positions of group {self.group_id!r} not committed: "
                                 f"this member is not in the group's current generation "
                                 f"({error.str()}); "
                                 + ("inside a rebalance callback the new generation cannot "
                                    "be waited for" if inside else
                                    f"owned now: {self.owned()}")) from None
                if code == KafkaError.OFFSET_METADATA_TOO_LARGE:
                    raise _error(code, "positions not committed: the broker's "
                                 "offset.metadata.max.bytes is smaller than a position"
                                 ) from None
                raise _error(code, f"positions of group {self.group_id!r} not committed: "
                             f"{error.str()}") from None
            for tp in results or []:
                if tp.error is not None:
                    raise _error(tp.error.code(), f"position of source partition "
                                 f"{tp.partition} not committed: {tp.error.str()}")
            self.committed(updates)
            return

    def _await_generation(self, consumer: Consumer, updates: Mapping, deadline: float) -> None:
        from .engine.group_metadata import parse_group_metadata

        stale = parse_group_metadata(consumer.consumer_group_metadata()).generation_id
        if self._holding is None:
            self._holding = {}
        try:
            while time.monotonic() < deadline and consumer is self.consumer:
                self.poll(0.05)
                generation = parse_group_metadata(
                    consumer.consumer_group_metadata()).generation_id
                if generation > stale and not self._unread and not (
                        self._holding and set(updates) & set(self._holding)):
                    return
        finally:
            log.info("group %s: commit waited for generation > %d: now %d, unread %s, "
                     "held %s, owned %s", self.group_id, stale, parse_group_metadata(
                         consumer.consumer_group_metadata()).generation_id,
                     sorted(self._unread), self._holding, self.owned())
            held, self._holding = self._holding or {}, None
            if held:  # not given back: lost for good
                callback = self.callbacks[2] or self.callbacks[1]
                if callback is not None:
                    callback(self.producer, sorted(held))

    def periodic_commit(self) -> None:
        """KIP-910: when nothing was committed for positions.commit.interval.ms, ask the hook
        and commit what it returns (in transactional mode a transaction of position records
        only)."""
        if (not self.positions or self.hook is None
                or time.monotonic() - self._last_commit < self.commit_interval_s):
            return
        producer = self.producer
        transactions = self.transactions
        state = transactions.state()
        if state is not None and state is not TxnState.READY:
            return  # a transaction is open: its commit_transaction asks the hook
        self._last_commit = time.monotonic()  # a failing hook is not asked again at once
        updates = self.prepare(None, "update_offsets_cb")
        if not updates:
            return
        if state is None:
            # Only the position records are waited for: the hook's positions count as
            # acknowledged, and a produce path must not wait for the application's records.
            delivered = self.write_records(updates)
            deadline = time.monotonic() + self.io_timeout_s
            while len(delivered) < len(updates) and time.monotonic() < deadline:
                producer.poll(0.05)
            self.commit_direct(updates, self.offsets(updates, delivered), None)
            return
        producer.begin_transaction()
        try:
            self.add_to_transaction(updates, None)
            transactions.commit()
        except KafkaException:
            if transactions.state() is not TxnState.FATAL_ERROR:
                producer.abort_transaction()
            raise
        self.committed(updates)

    def close(self) -> None:
        if self._closed:
            return
        # Closed before the consumer: an assignment librdkafka completes while it leaves the
        # group must not read positions through a handle being destroyed (committed() then
        # fails with _DESTROY and the error came out of close()); revocations still reach
        # on_revoke (_gone).
        self._closed = True
        consumer = self.consumer
        try:
            if consumer is not None:
                consumer.close()  # LeaveGroup; on_revoke runs for what is owned
        finally:
            self.positions.clear()
