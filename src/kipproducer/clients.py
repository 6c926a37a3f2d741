"""What the producer groups and the mirror share about the librdkafka clients they run beside a
Producer: which properties reach those clients, and reading the first record at an offset."""

from __future__ import annotations

import logging
import re
import threading
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


#: Where the librdkafka clients that kipproducer runs log (the Producer's own handle, and the
#: mirror's, producer groups' and Spark source's internal consumers and admin clients), unless
#: the user's config gives a ``logger``: Python logging, at the level the application sets
#: (``logging.getLogger("kipproducer.librdkafka").setLevel(...)``). A message that only repeats
#: an earlier one (librdkafka retries a refused connection every few ms, each time with a
#: line) is dropped for ``REPEAT_S`` seconds, so a wrong bootstrap address gives one line
#: naming it, not hundreds.
LIBRDKAFKA_LOGGER = logging.getLogger("kipproducer.librdkafka")
REPEAT_S = 60.0


class _DropRepeats(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        # librdkafka's lines differ only in counters and timings when they repeat, and the
        # client's name ("rdkafka#consumer-3") differs from one internal client to the next
        key = (record.levelname, re.sub(r"\d+", "#", re.sub(r"\[[^\]]*#[^\]]*\]", "", text)))
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < REPEAT_S:
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
        return True


LIBRDKAFKA_LOGGER.addFilter(_DropRepeats())


def with_logger(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with kipproducer's ``logger`` when it has none (librdkafka's own stderr
    logging otherwise), or only a logger's name (a Spark option is a string)."""
    out = dict(conf)
    if not hasattr(out.get("logger"), "log"):
        out["logger"] = LIBRDKAFKA_LOGGER
    return out


def connection_properties(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The properties of ``conf`` that say how to reach and authenticate to the cluster, and
    where to log (``logger``: the user's, else ``LIBRDKAFKA_LOGGER``)."""
    return with_logger({k: v for k, v in conf.items()
                        if k in _CONNECTION or k.startswith(_CONNECTION_PREFIXES)})


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
