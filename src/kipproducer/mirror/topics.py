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
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic

log = logging.getLogger("kipproducer.mirror")

#: Topic configs a target gets when the target broker refuses the source's full set (the ones
#: that decide what a copy keeps: compaction, retention, sizes).
ESSENTIAL_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes",
                     "delete.retention.ms", "min.compaction.lag.ms", "max.message.bytes",
                     "message.timestamp.type")


class MirrorError(Exception):
    """A mirror cannot go on: the message says what is wrong and what to do."""


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
        except KafkaException as exc:
            raise MirrorError(f"the source cluster did not answer: {exc.args[0].str()}") from None
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
        except KafkaException as exc:
            log.warning("configs of source topic %s not read (%s): the target gets the "
                        "broker's defaults", topic, exc.args[0].str())
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
        except KafkaException as exc:
            raise MirrorError(f"the target cluster did not answer: {exc.args[0].str()}") from None
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
            except KafkaException as exc:
                raise MirrorError(
                    f"target topic {target!r} has {have} partitions, the source {source!r} "
                    f"has {count}, and it could not be grown: {exc.args[0].str()}") from None
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
            except KafkaException as exc:
                error = exc.args[0]
                if error.name() == "TOPIC_ALREADY_EXISTS":
                    return False
                if error.name() != "INVALID_CONFIG" or attempt is not configs:
                    raise MirrorError(f"target topic {target!r} could not be created: "
                                      f"{error.str()}") from None
                log.warning("the target refused the configs of %s (%s); creating it with "
                            "the essential ones", source, error.str())
        return True  # not reached: the second attempt returns or raises
