"""Tansu, a broker that is not ours, as the mirror's source (the target is `kip broker`).

Tansu answers ListOffsets with wrong end offsets and shows aborted records to read_committed
readers (../shared/reference/tansu.md): the mirror reads to the end of each partition (Fetch
is right there) and never trusts the source's end offset, and the copies are compared with
what a stock librdkafka consumer of the source reads, aborted records included.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from mirror_support import group_offsets, read, unique

from kipproducer.mirror import Mirror

PARTITIONS = 3


def tansu_topic(bootstrap: str, n: int) -> str:
    topic = unique("tansu")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % PARTITIONS,
                  headers=[("i", b"%d" % i)], timestamp=1_795_000_000_000 + i)
    assert p.flush(30) == 0
    t = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("t")})
    t.init_transactions(30)
    for r in range(4):  # markers leave holes in the offsets
        t.begin_transaction()
        for part in range(PARTITIONS):
            t.produce(topic, b"txn%d" % r, b"t", partition=part)
        t.commit_transaction(30)
    for i in range(n, n + 30):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return topic


@pytest.mark.parametrize("mode", ["preserve", "transactional"])
def test_tansu_source(tansu, target, mode):
    topic = tansu_topic(tansu, 600)
    src = read(tansu, topic, PARTITIONS)
    assert any(b.offset - a.offset > 1 for rows in src.values()
               for a, b in zip(rows, rows[1:], strict=False)), "markers leave holes"
    group = unique("g")
    snapshot = Mirror(tansu, target.bootstrap_servers, topic, mode=mode, group=group,
                      progress=False).run(once=True)
    assert snapshot["reader"] == "fetch"  # the fast path reads Tansu too
    assert snapshot["records"] == sum(map(len, src.values()))
    if mode == "preserve":
        assert read(target.bootstrap_servers, topic, PARTITIONS, "read_uncommitted") == src
        # A second run resumes at the target's ends (Tansu's wrong end offsets unused).
        again = Mirror(tansu, target.bootstrap_servers, topic, progress=False).run(once=True)
        assert again["records"] == 0
        return
    dst = read(target.bootstrap_servers, topic, PARTITIONS)
    assert {p: [r.content() for r in rows] for p, rows in dst.items()} == \
        {p: [r.content() for r in rows] for p, rows in src.items()}
    assert group_offsets(target.bootstrap_servers, group, topic, PARTITIONS) == \
        {p: rows[-1].offset + 1 for p, rows in src.items()}


def test_tansu_target_refuses_the_preserve_mode(source, tansu):
    """Tansu takes no KIP-391 offsets and cannot host the emulation either (it shows aborted
    records to read_committed readers): the preserve mode is refused at start with the
    capability probe's reason, nothing written (docs/mirror.md)."""
    from mirror_support import create, fill

    from kipproducer.mirror import MirrorError

    topic = create(source, unique("to-tansu"), PARTITIONS)
    fill(source, topic, 30)
    with pytest.raises(MirrorError, match="cannot write target topic .*does not hide "
                                          "aborted transactions"):
        Mirror(source.bootstrap_servers, tansu, topic, progress=False).run(once=True)
