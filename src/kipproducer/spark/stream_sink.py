"""``df.writeStream.format("kip")``: the transactional sink for micro-batches, exactly once
across replays and driver restarts.

Tasks write as the batch sink's transactional path does (sink.py): each attempt's rows in an
open transaction of its own id. The driver's ``commit(messages, batch_id)`` then keeps a small
record per sink in a compacted topic of the target cluster (``kip.sink.stateTopic``, key: the
sink id), in three steps:

1. ``{"batch": B, "status": "committing", "txns": [...]}`` is written (and acknowledged)
   *before* any transaction of batch B is committed;
2. each of those transactions is committed (EndTxn under its producer id and epoch);
3. ``{"batch": B, "status": "done"}`` is written.

A batch that Spark replays (the driver died after step 3 but before Spark's own commit log
recorded the batch) finds ``done`` for it: its new transactions are aborted, nothing is
written twice. A driver that died in step 2 leaves ``committing``: the next commit finishes
exactly the recorded transactions first (a repeated commit is harmless), then aborts the
replay's. Every other open transaction under the sink's prefix (failed and zombie attempts)
is fenced.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from typing import Any

from .options import OptionError, connection, lower_keys
from .sink import TRANSACTIONAL, Message, WriteOptions, write_transactional
from .twophase import OpenTransaction, end, run_all, settle

try:  # pyspark is an extra: kipproducer imports without it
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # pragma: no cover - the spark extra is not installed
    DataSourceStreamArrowWriter = object  # type: ignore

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


def _txns(messages: list[Any]) -> list[OpenTransaction]:
    return [m.txn for m in messages if m is not None and getattr(m, "txn", None) is not None]


class KipStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str], columns: list[str]) -> None:
        opts = lower_keys(options)
        sink_id = opts.get("kip.sink.id")
        if not sink_id:
            raise OptionError("writeStream.format('kip') needs the option 'kip.sink.id': a "
                              "name for this query's sink, the same on every restart and used "
                              "by no other query (its transactions and state are kept under it)")
        if opts.get("kip.mode", TRANSACTIONAL) != TRANSACTIONAL:
            raise OptionError("writeStream.format('kip') writes transactionally only "
                              "(kip.mode=transactional)")
        if "offset" in {c.lower() for c in columns}:
            raise OptionError("an 'offset' column is for batch copies, not writeStream")
        prefix = f"kip-spark-{sink_id}"
        self.wo = WriteOptions({**opts, "kip.transactional.id.prefix": prefix}, columns)
        self.sink_id = sink_id
        self.state_topic = opts.get("kip.sink.statetopic", DEFAULT_STATE_TOPIC)
        SinkState(self.wo.props, self.state_topic, sink_id).ensure_topic()

    def write(self, iterator: Iterator[Any]) -> Message:
        return write_transactional(self.wo, iterator, unique=True)

    def _settle(self, commit: list[OpenTransaction], abort: list[OpenTransaction],
                keep: set[str] | None = None) -> None:
        settle(self.wo.props, self.wo.prefix + "-", commit=commit, abort=abort,
               timeout_ms=self.wo.timeout_ms, keep=keep or ())

    def commit(self, messages: list[Any], batchId: int) -> None:
        state = SinkState(self.wo.props, self.state_topic, self.sink_id)
        new = _txns(messages)
        record = state.read()
        if record is not None and record["status"] == "committing":
            # A driver died while committing this batch (or an earlier one): finish exactly
            # what it recorded; the replay's own transactions are not needed.
            recorded = [OpenTransaction(**t) for t in record["txns"]]
            log.warning("sink %s: finishing the commit of batch %d left by a previous driver "
                        "(%d transactions)", self.sink_id, record["batch"], len(recorded))
            run_all(lambda t=t: end(self.wo.props, t, True, self.wo.timeout_ms)
                    for t in recorded)
            state.write({"batch": record["batch"], "status": "done"})
            record = {"batch": record["batch"], "status": "done"}
        if record is not None and record["batch"] >= batchId:
            log.info("sink %s: batch %d was committed before; the replay writes nothing",
                     self.sink_id, batchId)
            self._settle([], new)
            return
        state.write({"batch": batchId, "status": "committing",
                     "txns": [asdict(t) for t in new]})
        self._settle(new, [])
        state.write({"batch": batchId, "status": "done"})

    def abort(self, messages: list[Any], batchId: int) -> None:
        record = SinkState(self.wo.props, self.state_topic, self.sink_id).read()
        keep = set()
        if record is not None and record["status"] == "committing":
            keep = {t["transactional_id"] for t in record["txns"]}  # the next commit's to end
        self._settle([], [t for t in _txns(messages) if t.transactional_id not in keep], keep)
