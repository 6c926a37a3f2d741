"""``df.writeStream.format("kip")``: the transactional sink for micro-batches, exactly once
across replays and driver restarts.

Tasks write as the batch sink's transactional path does (sink.py): each attempt's rows in an
open transaction of its own id. The driver's ``commit(messages, batch_id)`` commits them
through the sink's ledger (ledger.py): a record written before the first EndTxn, so a batch
Spark replays after a driver restart is not written twice and a commit a dead driver left
half done is finished by the next one. Every other open transaction under the sink's prefix
(failed and zombie attempts) is fenced.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

# pyspark is there: the package refuses to import without it (__init__.py)
from pyspark.sql.datasource import DataSourceStreamArrowWriter

from .ledger import DEFAULT_STATE_TOPIC, Ledger, SinkState
from .options import OptionError, lower_keys
from .sink import (
    TRANSACTIONAL,
    Message,
    WriteOptions,
    report_committed,
    write_prefix,
    write_transactional,
)
from .twophase import OpenTransaction

log = logging.getLogger("kipproducer.spark")


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
        prefix = write_prefix(sink_id)
        self.wo = WriteOptions({**opts, "kip.transactional.id.prefix": prefix}, columns)
        self.sink_id = sink_id
        self.state_topic = opts.get("kip.sink.statetopic", DEFAULT_STATE_TOPIC)
        SinkState(self.wo.props, self.state_topic, sink_id).ensure_topic()

    def write(self, iterator: Iterator[Any]) -> Message:
        return write_transactional(self.wo, iterator, unique=True)

    def _ledger(self) -> Ledger:
        return Ledger(self.wo.props, self.state_topic, self.sink_id, self.wo.prefix,
                      self.wo.timeout_ms)

    def commit(self, messages: list[Any], batchId: int) -> None:
        txns = _txns(messages)
        if self._ledger().commit(batchId, txns):  # (a replayed batch: the ledger logs it)
            report_committed(f"stream {self.sink_id} batch {batchId}", messages, len(txns))

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._ledger().abort(_txns(messages))


__all__ = ["DEFAULT_STATE_TOPIC", "KipStreamWriter", "SinkState"]
