"""A mirror's numbers per partition: records and bytes copied, replication latency and lag.

- records, bytes: acknowledged by the target (preserve mode) or committed in a target
  transaction (transactional mode); bytes are keys + values with the consumer reader, the
  records' encoded size (framing and headers included) with the fetch reader;
- latency_ms: when the partition's last copied record was acknowledged or committed, minus its
  timestamp (the source's CreateTime or LogAppendTime);
- lag: the source's high watermark (as the source consumer last saw it) minus the next offset
  to copy.

A progress line goes to stderr (redrawn on a terminal, a line every 10 s otherwise), and
``--metrics-json FILE`` rewrites FILE atomically with every snapshot.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import TextIO


@dataclass
class PartitionMetrics:
    source_topic: str
    target_topic: str
    partition: int
    records: int = 0
    bytes: int = 0
    latency_ms: int = -1
    next_offset: int = -1
    high_watermark: int = -1

    @property
    def lag(self) -> int:
        if self.high_watermark < 0 or self.next_offset < 0:
            return -1
        return max(self.high_watermark - self.next_offset, 0)


class Metrics:
    def __init__(self, mode: str, json_path: str | None = None, stream: TextIO | None = None,
                 progress: bool = True) -> None:
        self.mode = mode
        self.json_path = json_path
        self.stream = sys.stderr if stream is None else stream
        self.progress = progress
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.interval = 0.5 if self.tty else 10.0
        self.partitions: dict[tuple[str, int], PartitionMetrics] = {}
        self.started = time.monotonic()
        self.last_shown = 0.0
        self.transactions = 0
        self.reader = ""  # "fetch" or "consumer": Mirror.reader_kind

    def partition(self, source_topic: str, target_topic: str,
                  partition: int) -> PartitionMetrics:
        key = (source_topic, partition)
        found = self.partitions.get(key)
        if found is None:
            found = self.partitions[key] = PartitionMetrics(source_topic, target_topic,
                                                            partition)
        return found

    def copied(self, m: PartitionMetrics, records: int, size: int, last_timestamp: int,
               next_offset: int) -> None:
        m.records += records
        m.bytes += size
        if last_timestamp >= 0:
            m.latency_ms = max(int(time.time() * 1000) - last_timestamp, 0)
        m.next_offset = max(m.next_offset, next_offset)

    @property
    def records(self) -> int:
        return sum(m.records for m in self.partitions.values())

    def snapshot(self) -> dict:
        lags = [m.lag for m in self.partitions.values() if m.lag >= 0]
        return {
            "mode": self.mode,
            "reader": self.reader,
            "elapsed_s": round(time.monotonic() - self.started, 3),
            "records": self.records,
            "bytes": sum(m.bytes for m in self.partitions.values()),
            "lag": sum(lags),
            "transactions": self.transactions,
            "partitions": [{**asdict(m), "lag": m.lag}
                           for _, m in sorted(self.partitions.items())],
        }

    def tick(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last_shown < self.interval:
            return
        self.last_shown = now
        snap = self.snapshot()
        if self.json_path:
            tmp = f"{self.json_path}.tmp"
            with open(tmp, "w") as f:
                json.dump(snap, f, indent=1)
            os.replace(tmp, self.json_path)
        if not self.progress:
            return
        rate = snap["records"] / max(snap["elapsed_s"], 1e-3)
        latencies = [m.latency_ms for m in self.partitions.values() if m.latency_ms >= 0]
        line = (f"kip mirror ({self.mode}): {snap['records']:,} records copied "
                f"({rate:,.0f}/s), {len(self.partitions)} partitions, lag {snap['lag']:,}"
                + (f", latency {max(latencies):,} ms" if latencies else ""))
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
