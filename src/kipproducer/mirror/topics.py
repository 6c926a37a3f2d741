"""Which source topics a mirror copies, and their target topics (created, grown, configured).

A source topic is mirrored when its whole name matches ``--topics`` (a regular expression) and
it is not internal (``__consumer_offsets``, ``__transaction_state``, a producer group's
positions topic...). Its target topic is ``rename.format(topic=name)``. A missing target topic
is created with the source's partition count and the configs set on the source topic; a target
with fewer partitions is grown (CreatePartitions) as the source grows.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic

log = logging.getLogger("kipproducer.mirror")

#: Topic configs a target gets when the target broker refuses the source's full set (the ones
#: that decide what a copy keeps: compaction, retention, sizes).
ESSENTIAL_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes",
                     "delete.retention.ms", "min.compaction.lag.ms", "max.message.bytes",
                     "message.timestamp.type")


class MirrorError(Exception):
    """A mirror cannot go on: the message says what is wrong and what to do."""


#: What a cluster answers while a leader or a coordinator moves, or a broker is away: worth
#: asking again (besides any error librdkafka marks retriable).
TRANSIENT_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN, KafkaError._WAIT_COORD, KafkaError._NOENT,
    # librdkafka's cache may lack a partition the mirror knows while a node just restarted
    # serves metadata that lags (Apache Kafka, a node back from kill -9): asked again, and
    # still raised once the mirror's timeout has passed
    KafkaError._UNKNOWN_PARTITION,
    # a request in flight to a node that left the metadata (killed -9, fenced by Kafka): its
    # broker handle is destroyed under it; the next try goes to the partition's new leader
    KafkaError._DESTROY_BROKER,
})

#: What the failed calls of a mirror raise: librdkafka's errors, and the builtin TimeoutError
#: of a future (an admin call's ``result(timeout)``) that got no answer in time.
CLIENT_ERRORS = (KafkaException, TimeoutError)


def error_text(exc: BaseException) -> str:
    """What a KafkaException or a future's TimeoutError says."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    if isinstance(exc, TimeoutError):
        return f"no answer in time ({exc or 'timed out'})"
    return str(exc) or repr(exc)


def kafka_error_of(exc: BaseException) -> KafkaError:
    """The KafkaError of a KafkaException; a future's TimeoutError as _TIMED_OUT."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return KafkaError(KafkaError._TIMED_OUT, error_text(exc), retriable=True)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):
        return True
    if not isinstance(exc, KafkaException):
        return False
    error = kafka_error_of(exc)
    return not error.fatal() and (error.retriable() or error.code() in TRANSIENT_CODES)


T = TypeVar("T")


def retry_transient(call: Callable[[], T], timeout: float) -> T:
    """``call()``, asked again while it fails with a transient error (a leader or coordinator
    moving, a broker away, a timeout) until ``timeout`` seconds have passed; the last error
    is raised then, and any other error at once."""
    deadline = time.monotonic() + timeout
    backoff = 0.05
    while True:
        try:
            return call()
        except CLIENT_ERRORS as exc:
            remaining = deadline - time.monotonic()
            if not is_transient(exc) or remaining <= 0:
                raise
            log.info("transient error, asking again: %s", error_text(exc))
        time.sleep(min(backoff, remaining))
        backoff = min(backoff * 2, 1.0)


@dataclass
class TopicPair:
    source: str
    target: str
    partitions: int  # the source's partition count when last looked at


class TopicMap:
    """The source topics matching a pattern and their target topics."""

    def __init__(self, source_config: dict, target_config: dict, pattern: str,
                 rename: str = "{topic}", timeout: float = 30.0) -> None:
        try:
            self.pattern = re.compile(pattern)
        except re.error as exc:
            raise MirrorError(f"--topics {pattern!r} is not a regular expression: {exc}") from None
        if "{topic}" not in rename:
            raise MirrorError(f"--rename {rename!r} must contain {{topic}} (two source topics "
                              "would otherwise share one target)")
        self.rename = rename
        self.configs = {"source": source_config, "target": target_config}
        self._admins: dict[str, AdminClient] = {}
        self.timeout = timeout
        self.pairs: dict[str, TopicPair] = {}

    @property
    def source_admin(self) -> AdminClient:
        return self._admin("source")

    @property
    def target_admin(self) -> AdminClient:
        return self._admin("target")

    def _admin(self, side: str) -> AdminClient:
        admin = self._admins.get(side)
        if admin is None:
            admin = self._admins[side] = AdminClient(self.configs[side])
        return admin

    def close(self) -> None:
        """Let the admin clients go now (librdkafka handles left to the garbage collector
        would go on reconnecting to clusters that may be gone)."""
        self._admins.clear()

    def target_name(self, source: str) -> str:
        return self.rename.format(topic=source)

    def refresh(self) -> list[TopicPair]:
        """Look at the source: new matching topics and partitions are prepared on the target.
        Returns the pairs whose partitions changed (new topics included)."""
        try:
            meta = self.source_admin.list_topics(timeout=self.timeout)
        except CLIENT_ERRORS as exc:
            raise MirrorError(f"the source cluster did not answer: {error_text(exc)}") from None
        changed = []
        for name, topic in sorted(meta.topics.items()):
            if name.startswith("__") or not self.pattern.fullmatch(name):
                continue
            if topic.error is not None:
                continue
            count = len(topic.partitions)
            pair = self.pairs.get(name)
            if pair is not None and pair.partitions == count:
                continue
            target = self.target_name(name)
            self._ensure_target(name, target, count)
            if pair is None:
                pair = self.pairs[name] = TopicPair(name, target, count)
            pair.partitions = count
            changed.append(pair)
        return changed

    def _source_configs(self, topic: str) -> dict[str, str]:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            entries = self.source_admin.describe_configs([resource])[resource].result(
                self.timeout)
        except CLIENT_ERRORS as exc:
            log.warning("configs of source topic %s not read (%s): the target gets the "
                        "broker's defaults", topic, error_text(exc))
            return {}
        # Only what was set on the topic itself: defaults stay the target broker's own.
        return {name: e.value for name, e in entries.items()
                if not e.is_default and not e.is_read_only and e.value is not None
                and getattr(e.source, "value", e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}

    def _ensure_target(self, source: str, target: str, count: int) -> None:
        # Created first, described after: a Metadata request for a missing topic may create it
        # with the broker's defaults (auto.create.topics.enable).
        if self._create(source, target, count):
            return
        try:
            meta = self.target_admin.list_topics(target, timeout=self.timeout)
        except CLIENT_ERRORS as exc:
            raise MirrorError(f"the target cluster did not answer: {error_text(exc)}") from None
        existing = meta.topics.get(target)
        have = (len(existing.partitions)
                if existing is not None and existing.error is None else 0)
        if have == 0:
            raise MirrorError(f"target topic {target!r} exists but has no partitions the "
                              f"target cluster describes ({existing.error if existing else ''})")
        if have < count:
            log.info("growing target topic %s from %d to %d partitions", target, have, count)
            future = self.target_admin.create_partitions(
                [NewPartitions(target, count)], request_timeout=self.timeout)[target]
            try:
                future.result()
            except CLIENT_ERRORS as exc:
                raise MirrorError(
                    f"target topic {target!r} has {have} partitions, the source {source!r} "
                    f"has {count}, and it could not be grown: {error_text(exc)}") from None
        elif have > count:
            raise MirrorError(
                f"target topic {target!r} has {have} partitions but source topic {source!r} "
                f"has {count}: the target is not a copy of this source (a mirror keeps "
                "partition numbers); use another --rename or delete the target topic")

    def _create(self, source: str, target: str, count: int) -> bool:
        """Create the target topic; False when it exists already."""
        configs = self._source_configs(source)
        if configs.get("message.timestamp.type") == "LogAppendTime":
            # A LogAppendTime target would stamp its own clock over the copies; as CreateTime
            # it keeps what the mirror writes: the source's append times, in batches marked
            # LogAppendTime (the fetch reader), so readers see the source's type and times.
            del configs["message.timestamp.type"]
            log.info("target topic %s: CreateTime, so the source's LogAppendTime stamps are "
                     "kept", target)
        for attempt in (configs, {k: v for k, v in configs.items() if k in ESSENTIAL_CONFIGS}):
            future = self.target_admin.create_topics(
                [NewTopic(target, num_partitions=count, replication_factor=-1,
                          config=attempt)], request_timeout=self.timeout)[target]
            try:
                future.result()
                dropped = sorted(set(configs) - set(attempt))
                log.info("created target topic %s (%d partitions, configs %s%s)", target,
                         count, attempt, f"; refused by the target: {dropped}" if dropped
                         else "")
                return True
            except CLIENT_ERRORS as exc:
                error = kafka_error_of(exc)
                if error.name() == "TOPIC_ALREADY_EXISTS":
                    return False
                if error.name() != "INVALID_CONFIG" or attempt is not configs:
                    raise MirrorError(f"target topic {target!r} could not be created: "
                                      f"{error.str()}") from None
                log.warning("the target refused the configs of %s (%s); creating it with "
                            "the essential ones", source, error.str())
        return True  # not reached: the second attempt returns or raises
