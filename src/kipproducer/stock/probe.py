"""The capability probe run once before anything is written in emulated mode.

Emulation needs two things of the cluster (docs/stock-clusters.md): transactions
(InitProducerId with a transactional id), and read_committed readers that do not see aborted
records. The probe checks both where they cannot disturb anyone's offsets: in a topic of its
own (``kip.emulation.probe.topic``, created with one partition when missing), it writes one
record in a transaction and aborts it, then one committed record, and reads from the aborted
record's offset at read_committed until it meets the committed one. A broker that shows the
aborted record (Tansu does) or has no transactions is refused with one error, and the result
is remembered per bootstrap address for the life of the process.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PROBE_VALUE = b"kip-emulation-probe: aborted"
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
    try:
        try:
            producer.init_transactions(timeout)
        except KafkaException as exc:
            return _refusal(f"transactions are unavailable (InitProducerId with a "
                            f"transactional id failed: {exc.args[0].str()})")
        aborted = _write(producer, topic, PROBE_VALUE, commit=False, timeout=timeout)
        _write(producer, topic, COMMITTED_VALUE, commit=True, timeout=timeout)
    finally:
        producer.flush(1)
    if _reads_aborted(connection, topic, aborted, timeout):
        return _refusal(f"a read_committed reader was given the aborted record at offset "
                        f"{aborted} of {topic!r}: this broker does not hide aborted "
                        "transactions, so fillers would show")
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


def _write(producer: Producer, topic: str, value: bytes, *, commit: bool,
           timeout: float) -> int:
    landed: list = []
    producer.begin_transaction()
    producer.produce(topic, value, partition=0,
                     on_delivery=lambda err, msg: landed.append((err, msg)))
    producer.flush(timeout)
    if not landed or landed[0][0] is not None:
        producer.abort_transaction(timeout)
        raise KafkaException(landed[0][0] if landed else KafkaError(
            KafkaError._TIMED_OUT, "the probe record was not acknowledged"))
    (producer.commit_transaction if commit else producer.abort_transaction)(timeout)
    return landed[0][1].offset()


def _reads_aborted(connection: Mapping[str, Any], topic: str, aborted: int,
                   timeout: float) -> bool:
    consumer = Consumer({**connection, "group.id": f"kip-probe-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, aborted)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.1):
                if msg.error() is not None:
                    continue
                if msg.value() == PROBE_VALUE and msg.offset() == aborted:
                    return True
                if msg.value() == COMMITTED_VALUE:
                    return False
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "the probe's committed "
                                        f"record was not read back from {topic!r}"))
    finally:
        consumer.close()
