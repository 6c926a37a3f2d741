"""The sink's ledger: a small record per sink (a streaming query's ``kip.sink.id`` or a batch
write's ``kip.write.id``) in a compacted topic of the target cluster, so that a commit a
driver began is finished, never repeated, by the next driver.

The driver's commit of batch B (a micro-batch; 0 for a batch write) is three steps:

1. ``{"batch": B, "status": "committing", "txns": [...]}`` is written (and acknowledged)
   *before* any transaction of batch B is committed;
2. each of those transactions is committed (EndTxn under its producer id and epoch);
3. ``{"batch": B, "status": "done"}`` is written.

A driver that died in step 2 leaves ``committing``: whoever comes next (the next commit, a
re-run write, ``recover_write``) first commits exactly the recorded transactions (a repeated
commit is harmless) and marks the batch done. A batch found ``done`` is not written again:
the new attempt's transactions are aborted.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from .options import connection
from .twophase import OpenTransaction, end, run_all, settle

log = logging.getLogger("kipproducer.spark")

DEFAULT_STATE_TOPIC = "kip-spark-sinks"


class SinkState:
    """The sink's record in the state topic (one compacted partition, keyed by sink id)."""

    def __init__(self, props: Mapping[str, Any], topic: str, sink_id: str) -> None:
        self.conf = connection(props)
        self.topic, self.sink_id = topic, sink_id

    def ensure_topic(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.conf)
        if self.topic in admin.list_topics(timeout=30).topics:
            return
        future = admin.create_topics([NewTopic(self.topic, 1, -1, config={
            "cleanup.policy": "compact"})])[self.topic]
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def read(self) -> dict | None:
        """The sink's last record, or None."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        consumer = Consumer({**self.conf, "group.id": f"kip-spark-state-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest"})
        found: dict | None = None
        key = self.sink_id.encode()
        try:
            consumer.assign([TopicPartition(self.topic, 0, -2)])
            deadline = time.monotonic() + 60
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"state topic {self.topic} not read to its end")
                m = consumer.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return found
                    raise KafkaException(m.error())
                if m.key() == key:
                    found = None if m.value() is None else json.loads(m.value())
        finally:
            consumer.close()

    def write(self, record: dict) -> None:
        from confluent_kafka import Producer

        p = Producer({**self.conf, "enable.idempotence": True, "acks": "all"})
        errors: list[Any] = []
        p.produce(self.topic, json.dumps(record).encode(), self.sink_id.encode(), partition=0,
                  on_delivery=lambda err, msg: errors.append(err))
        left = p.flush(60)
        if left or errors != [None]:
            raise RuntimeError(f"sink {self.sink_id}: its state was not written to "
                               f"{self.topic}: {errors or 'not delivered in 60 s'}")



class Ledger:
    """One sink's commits: its state record, its transactions' prefix and client settings."""

    def __init__(self, props: Mapping[str, Any], state_topic: str, sink_id: str,
                 prefix: str, timeout_ms: int) -> None:
        self.props, self.sink_id, self.prefix = props, sink_id, prefix
        self.timeout_ms = timeout_ms
        self.state = SinkState(props, state_topic, sink_id)

    def finish_recorded(self) -> dict | None:
        """The sink's record, after committing the transactions of a commit a previous driver
        left half done (then the record says ``done``)."""
        record = self.state.read()
        if record is None or record["status"] != "committing":
            return record
        recorded = [OpenTransaction(**t) for t in record["txns"]]
        log.warning("sink %s: finishing the commit of batch %d left by a previous driver "
                    "(%d transactions)", self.sink_id, record["batch"], len(recorded))
        run_all(lambda t=t: end(self.props, t, True, self.timeout_ms) for t in recorded)
        done = {"batch": record["batch"], "status": "done"}
        self.state.write(done)
        return done

    def settle(self, commit: list[OpenTransaction], abort: list[OpenTransaction],
               keep: set[str] | None = None) -> None:
        settle(self.props, self.prefix + "-", commit=commit, abort=abort,
               timeout_ms=self.timeout_ms, keep=keep or ())

    def commit(self, batch_id: int, new: list[OpenTransaction]) -> bool:
        """Commit batch ``batch_id``'s transactions ``new`` through the record; False when
        the batch was committed before (``new`` is aborted then)."""
        record = self.finish_recorded()
        if record is not None and record["batch"] >= batch_id:
            log.info("sink %s: batch %d was committed before; this attempt writes nothing",
                     self.sink_id, batch_id)
            self.settle([], new)
            return False
        self.state.write({"batch": batch_id, "status": "committing",
                          "txns": [asdict(t) for t in new]})
        self.settle(new, [])
        self.state.write({"batch": batch_id, "status": "done"})
        return True

    def abort(self, new: list[OpenTransaction]) -> None:
        """Abort ``new`` and fence the sink's other open transactions, except those a
        half-done commit recorded (the next driver commits them)."""
        record = self.state.read()
        keep = set()
        if record is not None and record["status"] == "committing":
            keep = {t["transactional_id"] for t in record["txns"]}
        self.settle([], [t for t in new if t.transactional_id not in keep], keep)
