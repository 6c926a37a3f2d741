"""What one gap costs an emulated offset copy (KIP-391 through Kafka's transactions,
docs/stock-clusters.md) on each kind of stock broker: the stand-in (`kip broker` with its
extensions off), and Apache Kafka with 1 node under each transaction protocol
(``transaction.version`` 2, Kafka 4.x's default, and 0, the classic one) and with 3 nodes
(replication factor 3, ``min.insync.replicas=2``).

Per broker, one partition, ``--records`` records written with produce_arrays(offsets=...)
in one call and flush(): once with no gap (the baseline), then with a gap of ``--gap``
offsets after every ``--run`` records. Each gap is a transaction of its own (fillers or an
empty transaction, and its marker), so the time per gap is (with gaps - baseline) / gaps.
Apache Kafka starts from the jars tests/apache_kafka/kafka_jars.py caches (Java and Maven
needed); ``--brokers`` picks which to run. ``--protocols`` runs each broker under each
``kip.transaction.protocol`` named (``auto``: Transactions V2 where the cluster finalizes
``transaction.version`` 2, the classic flow elsewhere; ``classic``: the classic flow forced),
one row each.

    python bench/side_by_side_gaps.py [--records N] [--run N] [--gap N] [--repeat N]
        [--brokers standin,kafka1,kafka1-tv0,kafka3] [--protocols auto,classic]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "apache_kafka"))

BROKERS = ("standin", "kafka1", "kafka1-tv0", "kafka3")
PROTOCOLS = ("auto", "classic", "v2")


@contextmanager
def started(kind: str) -> Iterator[str]:
    """The broker's bootstrap address while it runs."""
    if kind == "standin":
        from kipproducer.broker.embedded import EmbeddedBroker
        with EmbeddedBroker(config={"kip.extensions.enable": False}) as broker:
            yield broker.bootstrap_servers
        return
    from kafka_cluster import KafkaCluster
    nodes = 3 if kind == "kafka3" else 1
    tv = 0 if kind.endswith("-tv0") else 2
    with tempfile.TemporaryDirectory(prefix=f"gaps-{kind}-") as root, KafkaCluster(
            Path(root), nodes, transaction_version=tv) as cluster:
        yield cluster.bootstrap


def create(bootstrap: str, replication: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"gaps-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, replication)])[topic].result(60)
    time.sleep(0.5)   # the leader's metadata reaches every node
    return topic


def copy(bootstrap: str, topic: str, offsets: np.ndarray, protocol: str) -> float:
    from kipproducer import Producer
    with Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                   "acks": "all", "kip.mode": "emulated",
                   "kip.transaction.protocol": protocol,
                   "kip.emulation.transactional.id": f"gaps-{uuid.uuid4().hex}"}) as p:
        p.kip_mode(topic)    # the probe and the writer's fencing, outside the timed part
        values = np.array([b"v%d" % o for o in offsets], dtype=object)
        started_at = time.perf_counter()
        p.produce_arrays(topic, values, partition=0, offsets=offsets)
        left = p.flush(600)
        took = time.perf_counter() - started_at
    assert left == 0, f"{left} records without a report"
    return took


def offsets_with_gaps(records: int, run: int, gap: int) -> np.ndarray:
    steps = np.ones(records, np.int64)
    steps[run::run] += gap
    steps[0] = 0
    return np.cumsum(steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--run", type=int, default=200, help="records between two gaps")
    ap.add_argument("--gap", type=int, default=5, help="offsets missing in each gap")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--brokers", default=",".join(BROKERS))
    ap.add_argument("--protocols", default="auto",
                    help="kip.transaction.protocol values, a row each: auto, classic, v2")
    args = ap.parse_args()
    protocols = args.protocols.split(",")
    for protocol in protocols:
        assert protocol in PROTOCOLS, (f"--protocols: {protocol} is not one of "
                                       f"{', '.join(PROTOCOLS)}")
    dense = np.arange(args.records, dtype=np.int64)
    gappy = offsets_with_gaps(args.records, args.run, args.gap)
    gaps = (args.records - 1) // args.run
    print(f"{args.records} records, a gap of {args.gap} after every {args.run}: {gaps} gaps; "
          f"median of {args.repeat}")
    print(f"{'broker':<12} {'protocol':<9} {'dense s':>8} {'gaps s':>8} {'ms/gap':>8} "
          f"{'gaps/s':>8}")
    for kind in args.brokers.split(","):
        assert kind in BROKERS, f"--brokers: {kind} is not one of {', '.join(BROKERS)}"
        base: dict[str, list[float]] = {protocol: [] for protocol in protocols}
        with_gaps: dict[str, list[float]] = {protocol: [] for protocol in protocols}
        with started(kind) as bootstrap:
            replication = 3 if kind == "kafka3" else 1
            for _ in range(args.repeat):
                for protocol in protocols:   # taking turns: a load that changes hits each
                    base[protocol].append(copy(bootstrap, create(bootstrap, replication),
                                               dense, protocol))
                    with_gaps[protocol].append(copy(bootstrap, create(bootstrap, replication),
                                                    gappy, protocol))
        for protocol in protocols:
            b, g = statistics.median(base[protocol]), statistics.median(with_gaps[protocol])
            per_gap = (g - b) / gaps
            print(f"{kind:<12} {protocol:<9} {b:>8.2f} {g:>8.2f} {per_gap * 1000:>8.1f} "
                  f"{gaps / max(g - b, 1e-9):>8.1f}", flush=True)


if __name__ == "__main__":
    main()
