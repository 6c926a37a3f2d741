"""Kafka's own Java clients (4.x, the cached jars) against ``kip broker`` and, in the same test,
against a 1-node Apache Kafka (issue 47): the Java producer (kafka-verifiable-producer with
idempotence and acks=all, kafka-producer-perf-test), the Java consumer (kafka-verifiable-consumer
in a group of 3 with a member killed, kafka-console-consumer at both isolation levels), Kafka's
exactly-once copier (TransactionalMessageCopier) killed with -9 in the middle, and the KIP-848
consumer protocol.

What the clients print holds ids and times, so the tests compare what they did: records
acknowledged, where they landed, what a reader sees; on kip broker as on Kafka.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conformance import Pair, open_pair, same
from kafka_cluster import KafkaCluster
from tool_runs import (
    CONSOLE_CONSUMER,
    COPIER,
    GET_OFFSETS,
    PRODUCER_PERF,
    VERIFIABLE_CONSUMER,
    VERIFIABLE_PRODUCER,
    Target,
    events,
    run_both,
    spawn,
)


@pytest.fixture(scope="module")
def pair(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from open_pair(kafka1, tmp_path_factory)


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"%d" % i, value=b"record-%d" % i, partition=i % partitions)
    assert producer.flush(60) == 0


def _read_committed_count(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records a read_committed librdkafka consumer reads to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.time_ns()}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count, at_eof = 0, set()
    deadline = time.monotonic() + 60
    try:
        while len(at_eof) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} took over 60 s"
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is None:
                    count += 1
                    at_eof.discard(msg.partition())
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(msg.partition())
                else:
                    raise AssertionError(msg.error())
    finally:
        consumer.close()
    return count


def _wait(what: str, check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.3)


# -- the Java producer ----------------------------------------------------------------------------


def _end_offsets(text: str) -> dict[str, int]:
    """kafka-get-offsets' ``topic:partition:offset`` lines."""
    return {line.rsplit(":", 1)[0]: int(line.rsplit(":", 1)[1])
            for line in text.splitlines() if line.count(":") == 2}


def test_verifiable_producer_and_producer_perf_test(pair: Pair) -> None:
    """kafka-verifiable-producer (idempotent, acks=all) and kafka-producer-perf-test
    (acks=all): every record acknowledged, each at its own offset, the log ends where the
    acknowledgements say; the same on both brokers."""
    messages, perf_records = 3000, 20000
    for target in (pair.kafka, pair.kip):
        _create(target.bootstrap, "vp", 3)
        _create(target.bootstrap, "perf", 2)
        (target.scratch / "idempotent.properties").write_text(
            # the tool sets retries=0 itself, which idempotence refuses
            "enable.idempotence=true\nretries=2147483647\nmax.in.flight.requests.per.connection=5\n")
    # its own process: it prints its last events from a shutdown hook
    producers = [spawn(target, VERIFIABLE_PRODUCER, "--bootstrap-server", "{bs}", "--topic",
                       "vp", "--max-messages", str(messages), "--acks", "-1",
                       "--producer.config", "{dir}/idempotent.properties", name="vp")
                 for target in (pair.kafka, pair.kip)]
    assert [proc.wait(120) for proc in producers] == [0, 0]
    on_kafka, on_kip = run_both(pair.kafka, pair.kip, [
        (PRODUCER_PERF, "--topic", "perf", "--num-records", str(perf_records), "--record-size",
         "100", "--throughput", "-1", "--producer-props", "bootstrap.servers={bs}", "acks=all",
         "enable.idempotence=true"),
        (GET_OFFSETS, "--bootstrap-server", "{bs}", "--topic", "vp"),
        (GET_OFFSETS, "--bootstrap-server", "{bs}", "--topic", "perf"),
    ])
    facts = []
    for target, runs in ((pair.kafka, on_kafka), (pair.kip, on_kip)):
        assert [run.exit for run in runs] == [0, 0, 0], runs
        produced = events(target, "vp")
        acked = [e for e in produced if e["name"] == "producer_send_success"]
        errors = [e for e in produced if e["name"] == "producer_send_error"]
        [summary] = [e for e in produced if e["name"] == "tool_data"]
        by_partition: dict[int, list[int]] = {}
        for e in acked:
            by_partition.setdefault(e["partition"], []).append(e["offset"])
        ends = _end_offsets(runs[1].out)
        assert not errors, errors[:3]
        assert (summary["sent"], summary["acked"]) == (messages, messages)
        assert sorted(int(e["value"]) for e in acked) == list(range(messages))
        for p, offsets in by_partition.items():  # no gap, no duplicate, the log ends there
            assert sorted(offsets) == list(range(len(offsets))), p
            assert ends[f"vp:{p}"] == len(offsets)
        assert sum(ends.values()) == messages
        perf_lines = runs[0].out.strip().splitlines()
        assert perf_lines[-1].startswith(f"{perf_records} records sent"), perf_lines[-1:]
        assert sum(_end_offsets(runs[2].out).values()) == perf_records
        facts.append((summary["sent"], summary["acked"], sum(ends.values()),
                      sum(_end_offsets(runs[2].out).values())))
    assert facts[0] == facts[1]


# -- the Java consumer ----------------------------------------------------------------------------


def _assigned(target: Target, name: str) -> set[int] | None:
    """The partitions a VerifiableConsumer holds now (its last assignment event)."""
    held: set[int] | None = None
    for e in events(target, name):
        if e["name"] == "partitions_assigned":
            held = (held or set()) | {tp["partition"] for tp in e["partitions"]}
        elif e["name"] == "partitions_revoked":
            held = (held or set()) - {tp["partition"] for tp in e["partitions"]}
    return held


def _committed(target: Target, names: list[str]) -> dict[int, int]:
    """Each partition's highest offset the consumers committed successfully."""
    done: dict[int, int] = {}
    for name in names:
        for e in events(target, name):
            if e["name"] == "offsets_committed" and e.get("success"):
                for tp in e["offsets"]:
                    done[tp["partition"]] = max(done.get(tp["partition"], 0), tp["offset"])
    return done


def _group_of_three_with_a_kill(target: Target, topic: str, partitions: int,
                                per_partition: int) -> tuple[int, set[int], dict[int, int]]:
    names = [f"{topic}-member-{i}" for i in range(3)]
    procs = [spawn(target, VERIFIABLE_CONSUMER, "--bootstrap-server", "{bs}", "--topic", topic,
                   "--group-id", f"{topic}-group", "--reset-policy", "earliest",
                   "--session-timeout", "6000", name=name) for name in names]
    try:
        _wait("three members with partitions", lambda: all(
            _assigned(target, n) for n in names) and sum(
            len(_assigned(target, n) or ()) for n in names) == partitions)
        procs[0].send_signal(signal.SIGKILL)  # kill -9: no LeaveGroup, the session expires
        procs[0].wait(30)
        survivors = names[1:]
        held = _wait("the survivors hold every partition", lambda: (
            set().union(*(_assigned(target, n) or set() for n in survivors))
            if sum(len(_assigned(target, n) or ()) for n in survivors) == partitions
            else None))
        committed = _wait("every record committed", lambda: (
            c if len(c := _committed(target, names)) == partitions
            and all(o == per_partition for o in c.values()) else None))
        consumed = sum(e["count"] for n in names for e in events(target, n)
                       if e["name"] == "records_consumed")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    return consumed, held, committed


def test_verifiable_consumer_group_of_three_with_a_member_killed(pair: Pair) -> None:
    """Three kafka-verifiable-consumer members share 6 partitions; one is killed with -9; the
    two left take its partitions over after its session expires and commit every record."""
    topic, partitions, per_partition = "vc", 6, 100
    outcome = {}
    for target in (pair.kafka, pair.kip):
        _create(target.bootstrap, topic, partitions)
        _produce(target.bootstrap, topic, partitions * per_partition, partitions)
        consumed, held, committed = _group_of_three_with_a_kill(
            target, topic, partitions, per_partition)
        # at least once: every record, and those of the killed member's uncommitted batch again
        assert consumed >= partitions * per_partition
        outcome[target.name] = (held, committed)
    assert outcome["kafka"] == outcome["kip"] == (
        set(range(partitions)), {p: per_partition for p in range(partitions)})


def _isolation_topic(bootstrap: str, topic: str) -> Producer:
    """One partition: 3 committed transactional records, 2 aborted, 1 plain, then 2 in a
    transaction left open (returned, to abort at the end)."""
    _create(bootstrap, topic, 1)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    txn.init_transactions(60)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, key=b"c%d" % i, value=b"committed-%d" % i, partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, key=b"a%d" % i, value=b"aborted-%d" % i, partition=0)
    assert txn.flush(30) == 0  # written, then aborted
    txn.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, key=b"p", value=b"plain", partition=0)
    assert plain.flush(30) == 0
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, key=b"o%d" % i, value=b"open-%d" % i, partition=0)
    assert txn.flush(30) == 0
    return txn


def _console(isolation: str, records: int) -> tuple[str, ...]:
    """Reads ``records`` (then stops at once), or what there is in 10 s."""
    return (CONSOLE_CONSUMER, "--bootstrap-server", "{bs}", "--topic", "iso", "--partition",
            "0", "--offset", "earliest", "--isolation-level", isolation, "--max-messages",
            str(records), "--timeout-ms", "10000", "--formatter-property", "print.offset=true",
            "--formatter-property", "print.key=true")


def test_console_consumer_at_both_isolation_levels(pair: Pair) -> None:
    """kafka-console-consumer reads the same records at the same offsets from both:
    read_committed stops before the open transaction and skips the aborted one,
    read_uncommitted shows everything."""
    open_txns = [_isolation_topic(target.bootstrap, "iso") for target in (pair.kafka, pair.kip)]
    try:
        on_kafka, on_kip = run_both(pair.kafka, pair.kip, [
            _console("read_committed", 4), _console("read_uncommitted", 8)])
    finally:
        for txn in open_txns:
            txn.abort_transaction(30)
        open_txns.clear()
    for runs in (on_kafka, on_kip):
        committed, uncommitted = (run.out.splitlines() for run in runs)
        assert committed == ["Offset:0\tc0\tcommitted-0", "Offset:1\tc1\tcommitted-1",
                             "Offset:2\tc2\tcommitted-2", "Offset:7\tp\tplain"], committed
        assert [line.split("\t")[1] for line in uncommitted] == [
            "c0", "c1", "c2", "a0", "a1", "p", "o0", "o1"], uncommitted
    same([f"{a.command}: {a.out!r} != {b.out!r}" for a, b in zip(on_kafka, on_kip, strict=True)
          if a.out != b.out])


# -- Kafka's exactly-once copier, killed in the middle --------------------------------------------


def _copier(target: Target, name: str) -> subprocess.Popen:
    return spawn(target, COPIER, "--broker-list", "{bs}", "--transactional-id", "copier-1",
                 "--input-topic", "copy-in", "--input-partition", "0", "--output-topic",
                 "copy-out", "--consumer-group", "copier", "--transaction-size", "400",
                 # Kafka's new copier waits for the dead one's transaction to time out
                 "--transaction-timeout", "5000",
                 "--use-group-metadata", name=name)


def _copied_so_far(target: Target, name: str) -> int:
    progress = [e for e in events(target, name) if "remaining" in e]
    return progress[-1]["consumed"] if progress else 0


def test_transactional_message_copier_killed_with_minus_9(pair: Pair) -> None:
    """TransactionalMessageCopier copies an 8000-record partition through transactions; it is
    killed with -9 once it has copied some, then started again with the same transactional
    id: it fences the dead one, aborts its open transaction, resumes from the committed
    offsets, and a read_committed reader then counts exactly the source's records."""
    records = 8000
    for target in (pair.kafka, pair.kip):
        _create(target.bootstrap, "copy-in", 1)
        _create(target.bootstrap, "copy-out", 1)
        _produce(target.bootstrap, "copy-in", records, 1)
    for target in (pair.kafka, pair.kip):  # one at a time: killed while it is copying
        first = _copier(target, "copier-first")
        try:
            _wait(f"{target.name}: copier progress",
                  lambda t=target: _copied_so_far(t, "copier-first") >= 800)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        assert _copied_so_far(target, "copier-first") < records, "killed too late"
    second = {t.name: _copier(t, "copier-second") for t in (pair.kafka, pair.kip)}
    for target in (pair.kafka, pair.kip):
        proc = second[target.name]
        try:
            assert proc.wait(120) == 0, (target.scratch / "copier-second.out").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    counts = {t.name: _read_committed_count(t.bootstrap, "copy-out", 1)
              for t in (pair.kafka, pair.kip)}
    assert counts == {"kafka": records, "kip": records}


# -- the KIP-848 consumer protocol ----------------------------------------------------------------


def test_kip_848_consumer_protocol(pair: Pair) -> None:
    """group.protocol=consumer: Apache Kafka 4.x serves it; kip broker refuses it with one
    clear error that names the classic protocol (docs/broker.md)."""
    for target in (pair.kafka, pair.kip):
        _create(target.bootstrap, "kip848", 1)
        _produce(target.bootstrap, "kip848", 10, 1)
    on_kafka, on_kip = run_both(pair.kafka, pair.kip, [
        (CONSOLE_CONSUMER, "--bootstrap-server", "{bs}", "--topic", "kip848", "--group",
         "kip848-group", "--from-beginning", "--max-messages", "10", "--timeout-ms", "20000",
         "--command-property", "group.protocol=consumer")])
    assert on_kafka[0].exit == 0 and len(on_kafka[0].out.splitlines()) == 10, on_kafka
    refused = on_kip[0]  # the Java consumer's own words, as kip broker does not advertise
    # ConsumerGroupHeartbeat; kafka-console-consumer then ends (exit 0) with no record
    assert refused.out == "" and "Processed a total of 0 messages" in refused.err, refused
    assert ("The cluster does not support the new CONSUMER group protocol. Set "
            "group.protocol=classic on the consumer configs") in refused.err, refused.err
