"""``kip mirror --engine spark``: a one-time copy of several topics between two reference
brokers as one Spark job, every record at its source offset, resumed from the target's log
ends on the next run."""

from __future__ import annotations

import re

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from mirror_support import compacted_topic, fill, read, stable, transactions, trim, unique

from kipproducer import cli
from kipproducer.spark.backfill import backfill


def log_bounds(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        found = admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)})
        for tp, future in found.items():
            out.setdefault(tp.partition, []).append(future.result(30).offset)
    return {p: tuple(v) for p, v in out.items()}


def same_copy(source, target, topic: str, copy: str) -> None:
    want = read(source.bootstrap_servers, topic, 3)
    assert read(target.bootstrap_servers, copy, 3) == want  # offsets, keys, values, headers, ts
    src, dst = log_bounds(source.bootstrap_servers, topic, 3), \
        log_bounds(target.bootstrap_servers, copy, 3)
    for p in range(3):
        assert dst[p][0] == src[p][0], (topic, p)  # the same log start
        if want[p]:
            assert dst[p][1] == want[p][-1].offset + 1


def test_backfill_copies_topics_with_their_offsets_and_resumes(spark, source, target) -> None:
    prefix = unique("bf")
    compacted, txns = f"{prefix}-compacted", f"{prefix}-txns"
    compacted_topic(source, compacted, 2000)
    trim(source, compacted, 3, 30)
    compacted_topic(source, txns, 300)
    transactions(source, txns, 6)  # rounds 2 and 5 aborted: not copied (read_committed)
    stable(source.bootstrap_servers, txns, 3)
    # trimmed to its end: nothing to copy, yet the target's log start must move to 10, above
    # its log end (filled first: DeleteRecords stops at a log end)
    emptied = f"{prefix}-emptied"
    admin = AdminClient({"bootstrap.servers": source.bootstrap_servers})
    admin.create_topics([NewTopic(emptied, 3, 1)])[emptied].result(30)
    fill(source, emptied, 30)
    trim(source, emptied, 3, 10)
    pattern = re.escape(prefix) + "-.*"

    first = backfill(spark, source.bootstrap_servers, target.bootstrap_servers, pattern)
    assert (first.topics, first.partitions) == (3, 9)
    assert all(first.starts[(compacted, p)] >= 30 for p in range(3))  # from the log start
    same_copy(source, target, compacted, compacted)
    same_copy(source, target, txns, txns)
    same_copy(source, target, emptied, emptied)
    assert log_bounds(target.bootstrap_servers, emptied, 3) == {p: (10, 10) for p in range(3)}

    def aborted(bootstrap: str, topic: str) -> int:
        return sum((r.value or b"").startswith(b"t2-") for rs in read(
            bootstrap, topic, 3, "read_uncommitted").values() for r in rs)

    assert aborted(source.bootstrap_servers, txns) == 6
    assert aborted(target.bootstrap_servers, txns) == 0

    # More records on the source: the next run starts at the target's log ends.
    fill(source, compacted, 400, start=100_000)
    ends = {(compacted, p): hi for p, (_, hi) in
            log_bounds(target.bootstrap_servers, compacted, 3).items()}
    second = backfill(spark, source.bootstrap_servers, target.bootstrap_servers, pattern)
    for key, end in ends.items():
        assert second.starts[key] == end > 30
    same_copy(source, target, compacted, compacted)
    same_copy(source, target, txns, txns)


def test_kip_mirror_engine_spark(spark, source, target, capsys) -> None:
    topic = compacted_topic(source, unique("bf-cli"), 600)
    trim(source, topic, 3, 10)
    args = ["mirror", "--engine", "spark", "--source", source.bootstrap_servers,
            "--target", target.bootstrap_servers, "--topics", re.escape(topic),
            "--rename", "copy-{topic}"]
    assert cli.main(args) == 0
    assert "1 topics, 3 partitions" in capsys.readouterr().err
    same_copy(source, target, topic, f"copy-{topic}")
    assert cli.main(args) == 0  # caught up: nothing to copy, the copy unchanged
    same_copy(source, target, topic, f"copy-{topic}")
    assert cli.main([*args, "--mode", "transactional", "--group", "g"]) == 2
    assert "--engine spark is a one-time" in capsys.readouterr().err
