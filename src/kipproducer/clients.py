"""What the producer groups and the mirror share about the librdkafka clients they run beside a
Producer: which properties reach those clients, and reading the first record at an offset."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# Connection properties an internal consumer or admin client takes from the user's config.
_CONNECTION_PREFIXES = ("sasl.", "ssl.", "socket.", "reconnect.", "enable.ssl",
                        "broker.address", "client.dns", "api.version", "enable.sasl")
_CONNECTION = ("bootstrap.servers", "metadata.broker.list", "client.id", "security.protocol",
               "logger", "error_cb", "log_level", "debug")

#: first_records(): the offset is outside the partition's log (a consumer with
#: ``auto.offset.reset=error``).
OUT_OF_RANGE = "out of range"


def connection_properties(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The properties of ``conf`` that say how to reach and authenticate to the cluster."""
    return {k: v for k, v in conf.items()
            if k in _CONNECTION or k.startswith(_CONNECTION_PREFIXES)}


def first_records(consumer: Consumer, topic: str, at: Mapping[int, int],
                  timeout: float) -> dict[int, Any]:
    """{partition: the first record at or after ``at[partition]``, None at the partition's end,
    or OUT_OF_RANGE}. ``consumer`` needs ``enable.partition.eof``; it is assigned for the
    call only (never subscribed: it joins no group). KafkaException on other errors or when
    an answer is missing after ``timeout`` seconds (retriable)."""
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in at.items()])
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < len(at):
            if time.monotonic() > deadline:
                missing = sorted(set(at) - set(out))
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT, f"{topic}: no record or end of partitions "
                    f"{missing} within {timeout:.0f} s", retriable=True))
            message = consumer.poll(0.1)
            if message is None or message.partition() in out:
                continue
            error = message.error()
            if error is None:
                out[message.partition()] = message
            elif error.code() == KafkaError._PARTITION_EOF:
                out[message.partition()] = None
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                out[message.partition()] = OUT_OF_RANGE
            else:
                raise KafkaException(error)
        return out
    finally:
        consumer.unassign()
