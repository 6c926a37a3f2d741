"""The capability probe run once before anything is written in emulated mode.

Emulation needs two things of the cluster (docs/stock-clusters.md): transactions
(InitProducerId with a transactional id), and read_committed readers that do not see aborted
records while it shows every other producer's records, even those between an aborted
transaction's first record and its marker (Kafka's rule: a Fetch answer lists each aborted
transaction's producer id and first offset, and the reader drops only that producer's
transactional batches up to its abort marker). The probe checks these where they cannot
disturb anyone's offsets: in a topic of its own (``kip.emulation.probe.topic``, created with
one partition when missing), it writes one record in a transaction, one record of an
idempotent producer while that transaction is open, aborts the transaction, writes one
committed record, and reads from the aborted record's offset at read_committed until it meets
the committed one (by its offset: probes of other processes may write to the topic at the same
time). A broker that shows the aborted record (Tansu does), hides the other
producer's record, or has no transactions is refused with one error, and the result is
remembered per bootstrap address for the life of the process.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .log_ends import consumer_config

PROBE_VALUE = b"kip-emulation-probe: aborted"
INSIDE_VALUE = b"kip-emulation-probe: another producer, inside the aborted range"
COMMITTED_VALUE = b"kip-emulation-probe: committed"

_verdicts: dict[tuple[str, str], str | None] = {}
_lock = threading.Lock()


class EmulationUnsupported(KafkaException):
    """The cluster cannot run the emulation; ``args[0]`` is a KafkaError saying why."""


def probe_cluster(connection: Mapping[str, Any], probe_topic: str,
                  timeout: float = 30.0) -> None:
    """Raise :class:`EmulationUnsupported` when the cluster cannot run the emulation."""
    key = (str(connection.get("bootstrap.servers")), probe_topic)
    with _lock:
        if key not in _verdicts:
            try:
                _verdicts[key] = _run(connection, probe_topic, timeout)
            except Exception as exc:  # a cluster that cannot even run the probe
                detail = (exc.args[0].str() if isinstance(exc, KafkaException)
                          else f"{type(exc).__name__} {exc}".strip())
                _verdicts[key] = _refusal(f"the probe could not run: {detail}")
        verdict = _verdicts[key]
    if verdict is not None:
        raise EmulationUnsupported(KafkaError(KafkaError._UNSUPPORTED_FEATURE, verdict))


def _refusal(why: str) -> str:
    return ("the cluster cannot emulate offset= / expected_offset= with transactions "
            f"(docs/stock-clusters.md): {why}")


def _run(connection: Mapping[str, Any], topic: str, timeout: float) -> str | None:
    _ensure_topic(connection, topic, timeout)
    producer = Producer({**connection, "transactional.id": f"kip-probe-{uuid.uuid4().hex}",
                         "message.timeout.ms": int(timeout * 1000)})
    other = Producer({**connection, "enable.idempotence": True,
                      "message.timeout.ms": int(timeout * 1000)})
    try:
        try:
            producer.init_transactions(timeout)
        except KafkaException as exc:
            return _refusal(f"transactions are unavailable (InitProducerId with a "
                            f"transactional id failed: {exc.args[0].str()})")
        producer.begin_transaction()
        try:
            aborted = _acknowledged(producer, topic, PROBE_VALUE, timeout)
            inside = _acknowledged(other, topic, INSIDE_VALUE, timeout)
        finally:
            producer.abort_transaction(timeout)
        producer.begin_transaction()
        committed = _acknowledged(producer, topic, COMMITTED_VALUE, timeout)
        producer.commit_transaction(timeout)
    finally:
        producer.flush(1)
        other.flush(1)
    seen = _read_committed(connection, topic, aborted, committed, timeout)
    if (aborted, PROBE_VALUE) in seen:
        return _refusal(f"a read_committed reader was given the aborted record at offset "
                        f"{aborted} of {topic!r}: this broker does not hide aborted "
                        "transactions, so fillers would show")
    if (inside, INSIDE_VALUE) not in seen:
        return _refusal(f"a read_committed reader was not given the record at offset {inside} "
                        f"of {topic!r}, another producer's, written while an aborted "
                        "transaction was open: this broker hides more than the aborted "
                        "transaction's own records, so other writers' records would vanish")
    return None


def _ensure_topic(connection: Mapping[str, Any], topic: str, timeout: float) -> None:
    admin = AdminClient(dict(connection))
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    future = admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout
    while topic not in admin.list_topics(timeout=timeout).topics:
        if time.monotonic() > deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"probe topic {topic!r} not in metadata"))
        time.sleep(0.05)


def _acknowledged(producer: Producer, topic: str, value: bytes, timeout: float) -> int:
    """Produce one record to partition 0 and wait for it: its offset."""
    landed: list = []
    producer.produce(topic, value, partition=0,
                     on_delivery=lambda err, msg: landed.append((err, msg)))
    producer.flush(timeout)
    if not landed or landed[0][0] is not None:
        raise KafkaException(landed[0][0] if landed else KafkaError(
            KafkaError._TIMED_OUT, "the probe record was not acknowledged"))
    return landed[0][1].offset()


def _read_committed(connection: Mapping[str, Any], topic: str, start: int, end: int,
                    timeout: float) -> list[tuple[int, bytes]]:
    """(offset, value) of what a read_committed reader gets from ``start`` up to the probe's
    committed record, at ``end``. Known by its offset, not its value: another process's probe
    of the same topic may run at the same time, its records between this one's."""
    consumer = Consumer({**consumer_config(connection), "group.id": f"kip-probe-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    seen: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.1):
                if msg.error() is not None:
                    continue
                seen.append((msg.offset(), msg.value()))
                if msg.offset() >= end:
                    return seen
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "the probe's committed "
                                        f"record was not read back from {topic!r}"))
    finally:
        consumer.close()
