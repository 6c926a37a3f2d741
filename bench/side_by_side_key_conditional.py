"""Side-by-side per-key conditional appends (issue 44): kipproducer's ``expected_key_offset=``,
native on `kip broker` and emulated on Apache Kafka (1 node; 3 nodes with ``--systems``
naming kafka3), against NATS JetStream's
per-subject expected last sequence (the ``Nats-Expected-Last-Subject-Sequence`` header), the
same contract: "append this event to aggregate K only if K's last event is still at N".

The workload is an event store's: ``--keys`` aggregates (kip: keys of one partition;
JetStream: subjects of one stream, file storage), one writer. Each round appends one
100-byte event to every aggregate, each conditioned on the offset (sequence) the previous
round's acknowledgement gave that aggregate (the first round: absent), so every condition
holds and the writer learns each new position from the acknowledgements, as a real writer
must. Lanes, as a user calls each API:

* ``kip produce()``: one produce(expected_key_offset=) per event with a delivery callback,
  flush() at the end of the round (native only: emulated, each produce() is a transaction of
  its own, which the one-at-a-time table shows);
* ``kip produce_batch``: one call per round, a dict per event with ``expected_key_offset``, a
  callback per record;
* ``kip produce_arrays per-record``: one call per round with an int64
  ``expected_key_offsets`` array, a callback per record (``per_record=True``);
* ``kip produce_arrays``: the same without per-record callbacks: one report per batch, whose
  base offset gives every record's (a call's records of one partition are one batch);
* ``nats publish_async``: nats-py's ``js.publish_async()`` per event with the header, the
  round's futures gathered (a PubAck per event: JetStream has no other report).

A kip call's records of a partition are appended together or not at all; JetStream's
publishes are independent. Here every condition holds, so both write every event.

The one-at-a-time table appends ``--serial-records`` events one after the other, each
waiting for its acknowledgement (kip: produce() + flush(); nats: ``await js.publish()``).

The several-writers table runs ``--writers`` processes at once (4 by default), each with a
disjoint share of the aggregates (every N-th) and the same rounds, in each system's lane with
a report per event (kip: ``produce_arrays per-record``; nats: ``publish_async``), started
together once every writer is connected and warm, timed to the last writer's last
acknowledgement. Natively the writers share the one partition (the broker checks each key, so
no writer's append conflicts with another's); emulated, a partition per writer (the emulation
keeps one fenced transactional writer per partition); JetStream's share the stream.

The conflict run: two writer processes race on ``--conflict-keys`` aggregates, each making
``--conflict-attempts`` appends one at a time (the same keys in the same order), each
conditioned on what that writer last learnt of the key (its own append's position, or the
actual position a refusal named). Then the log is read back and judged: every append reported
as written is there once at its position (nothing lost, nothing duplicated), nothing else is,
each key's events form one chain (each event's condition names the event before it), and
every refusal named a position another append had already taken: exactly the expected
conflicts refused.

Each lane runs in its own process (its CPU, all threads, is the client's); the server's CPU
(every thread of the `kip broker` process, the Kafka JVM, or nats-server) is measured over
the same timed part. The three servers run for the whole bench, on loopback, with their data
on tmpfs when there is one; lanes alternate within each round; medians of ``--repeat``
rounds.

    python bench/side_by_side_key_conditional.py [--keys N] [--records N] [--repeat R]
        [--serial-records N] [--writers N] [--conflict-keys N] [--conflict-attempts N]
        [--systems kip,kafka1,kafka3,nats] [--nats-server PATH] [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from bench_support import (
    broker_data_dir,
    brokers_cpu,
    child_env,
    load_average,
    start_broker,
    versions,
)

HEADING = "## Per-key conditional appends against NATS JetStream (issue 44)"
VALUE_SIZE = 100
SYSTEMS = {"kip": "kip native, `kip broker`",
           "kafka1": "kip emulated, Apache Kafka 1 node",
           "kafka3": "kip emulated, Apache Kafka 3 nodes",
           "nats": "NATS JetStream",
           "nats3": "NATS JetStream, 3 servers"}
#: the JetStream systems, and each kip system's peer: the 3-node Kafka (replication 3) against
#: a 3-server JetStream cluster (streams of 3 replicas) when the run has one
NATS = ("nats", "nats3")
LANES = {"kip": ["kip produce()", "kip produce_batch", "kip produce_arrays per-record",
                 "kip produce_arrays"],
         "kafka1": ["kip produce_batch", "kip produce_arrays per-record", "kip produce_arrays"],
         "kafka3": ["kip produce_batch", "kip produce_arrays per-record", "kip produce_arrays"],
         "nats": ["nats publish_async"], "nats3": ["nats publish_async"]}
# the several-writers table: each system's lane with a report per event
WRITERS_LANE = {"kip": "kip produce_arrays per-record",
                "kafka1": "kip produce_arrays per-record",
                "kafka3": "kip produce_arrays per-record", "nats": "nats publish_async",
                "nats3": "nats publish_async"}
SERIAL_LANE = {"kip": "kip produce() + flush()", "kafka1": "kip produce() + flush()",
               "kafka3": "kip produce() + flush()",
               "nats": "nats await js.publish()", "nats3": "nats await js.publish()"}
PRODUCER_CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
# kip: a topic that keeps every key's last record (emulation refuses one whose retention can
# delete it, docs/per-key-conditional.md)
TOPIC_CONFIG = {"retention.ms": "-1"}
EXPECTED_HEADER = "Nats-Expected-Last-Subject-Sequence"
NATS_WRONG_LAST = 10071  # JetStream's "wrong last sequence: N" error code
# ... and "wrong last sequence" without N: a clustered stream's leader refusing a publish while
# another one on the subject is still being replicated
NATS_WRONG_LAST_PENDING = 10164
NATS_ABSENT = 0  # the header's "the subject has no message"


# -- the servers ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """nats-server with JetStream on free 127.0.0.1 ports, one server or (``servers=3``) a
    cluster of them routed to each other, each store in a fresh directory (tmpfs when there
    is one); stopped by PID. ``address``: the first server's (a client connects there; a
    stream of the cluster keeps ``replicas`` copies, one per server)."""

    def __init__(self, binary: str, servers: int = 1) -> None:
        path = shutil.which(binary)
        if path is None:
            raise SystemExit(f"no {binary!r}: install nats-server (Debian: apt-get install "
                             "nats-server) or pass --nats-server PATH")
        self.binary = path
        self.version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                      timeout=10).stdout.strip()
        self.replicas = servers
        self.store, self.where = broker_data_dir("kip-bench-nats-")
        ports = [(free_port(), free_port()) for _ in range(servers)]
        self.address = f"127.0.0.1:{ports[0][0]}"
        self.procs: list[subprocess.Popen] = []
        try:
            for i, (port, route) in enumerate(ports):
                store = os.path.join(self.store, f"s{i}")
                command = [path, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store,
                           "-l", os.path.join(self.store, f"nats-server-{i}.log")]
                if servers > 1:
                    command += ["-n", f"s{i}", "--cluster_name", "kip-bench",
                                "--cluster", f"nats://127.0.0.1:{route}", "--routes",
                                ",".join(f"nats://127.0.0.1:{r}" for j, (_, r) in
                                         enumerate(ports) if j != i)]
                self.procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))
            for (port, _), proc in zip(ports, self.procs, strict=True):
                asyncio.run(_nats_ready(f"127.0.0.1:{port}", proc))
        except BaseException:
            self.stop()
            raise
        self.proc = self.procs[0]

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.store, ignore_errors=True)


async def _nats_ready(address: str, proc: subprocess.Popen) -> None:
    import nats

    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode}")
        try:
            nc = await nats.connect(f"nats://{address}", connect_timeout=1,
                                    max_reconnect_attempts=0, allow_reconnect=False)
            try:
                await nc.jetstream().account_info()
                return
            finally:
                await nc.close()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _nats_admin(address: str, op: str, stream: str, replicas: int = 1) -> None:
    """Make (``add``) or delete (``delete``) a file-storage stream taking ``stream.>``."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(f"nats://{address}")
    try:
        js = nc.jetstream()
        if op == "add":
            await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"],
                                             storage=StorageType.FILE,
                                             num_replicas=replicas))
        else:
            await js.delete_stream(stream)
    finally:
        await nc.close()


async def _nats_log(address: str, stream: str) -> list[tuple[int, bytes, bytes]]:
    """Every message of the stream: (sequence, subject's last token, data)."""
    import nats

    nc = await nats.connect(f"nats://{address}")
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        log = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            log.append((seq, msg.subject.rsplit(".", 1)[1].encode(), msg.data))
        return log
    finally:
        await nc.close()


def kip_topic(bootstrap: str, topic: str, replication: int, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, partitions, replication, config=TOPIC_CONFIG)]
                        )[topic].result(30)


def kip_delete(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(60)


def kip_log(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """The partition as read_committed readers see it: (offset, key, value)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"judge-{topic}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 4})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10,
                                             cached=False)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        log = []
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    log.append((msg.offset(), msg.key(), msg.value()))
        return log
    finally:
        consumer.close()


# -- the lanes (each in a child process) ----------------------------------------------------


class Writer:
    """One of ``count`` writers of the several-writers table: its share of the aggregates
    (every count-th, disjoint from the others'), its partition, and the start gate the
    parent opens once every writer is connected and warm."""

    def __init__(self, index: int, count: int, partition: int, gate: str) -> None:
        self.index, self.count, self.partition, self.gate = index, count, partition, gate

    def share(self, names: list[bytes]) -> list[bytes]:
        return names[self.index::self.count]

    def ready_and_wait(self) -> None:
        open(os.path.join(self.gate, f"ready-{self.index}"), "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(self.gate, "go")):
            if time.monotonic() > deadline:
                raise RuntimeError("the start gate never opened")
            time.sleep(0.001)

    def done(self) -> None:
        open(os.path.join(self.gate, f"done-{self.index}"), "w").close()


def key_names(n: int) -> list[bytes]:
    return [b"k%011d" % i for i in range(n)]


def kip_producer(bootstrap: str, topic: str, system: str, warm_key: bytes = b"warm-up",
                 partition: int = 0):
    """A Producer that reaches ``topic`` in the system's mode; its first conditional append
    (engine, connections, the emulation's probe, fence and key index) made untimed, to
    ``warm_key`` in ``partition``."""
    from kipproducer import Producer
    from kipproducer.errors import KEY_ABSENT

    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    want = "native" if system == "kip" else "emulated"
    mode = p.kip_mode(topic)
    if mode != want:
        raise RuntimeError(f"{topic} is {mode} here, the bench wants {want}")
    out: list = []
    p.produce(topic, b"warm", warm_key, partition=partition, expected_key_offset=KEY_ABSENT,
              on_delivery=lambda err, msg: out.append(err))
    if p.flush(60) or out != [None]:
        raise RuntimeError(f"warm-up append failed: {out}")
    return p


def kip_rounds(lane: str, system: str, bootstrap: str, topic: str, keys: int, rounds: int,
               pids: list[int], writer: Writer | None = None) -> dict:
    """One lane's rounds over ``keys`` aggregates; as one of several writers (``writer``):
    over its share of the keys, in its partition, timed from the common start."""
    import numpy as np

    from kipproducer.errors import KEY_ABSENT

    names = key_names(keys)
    partition = 0
    if writer is None:
        p = kip_producer(bootstrap, topic, system)
    else:
        names, partition = writer.share(names), writer.partition
        p = kip_producer(bootstrap, topic, system, b"warm-up-%d" % writer.index, partition)
        keys = len(names)
    index = {k: i for i, k in enumerate(names)}
    value = os.urandom(VALUE_SIZE)
    last = np.full(keys, KEY_ABSENT, dtype=np.int64)
    failures: list = []

    def delivered(err, msg) -> None:  # a callback per record: each event's new position
        if err is None:
            last[index[msg.key()]] = msg.offset()
        else:
            failures.append(err)

    batches: list = []
    key_col = np.array(names, dtype=object)
    value_col = np.array([value] * keys, dtype=object)
    positions = np.arange(keys, dtype=np.int64)
    if writer is not None:
        writer.ready_and_wait()
    server0, cpu0, t0 = brokers_cpu(pids), time.process_time(), time.perf_counter()
    started = time.time()
    for _ in range(rounds):
        if lane == "kip produce()":
            produce = p.produce
            for i, key in enumerate(names):
                produce(topic, value, key, partition=partition, expected_key_offset=int(last[i]),
                        on_delivery=delivered)
        elif lane == "kip produce_batch":
            p.produce_batch(topic, [{"key": key, "value": value,
                                     "expected_key_offset": int(last[i])}
                                    for i, key in enumerate(names)],
                            partition=partition, on_delivery=delivered)
        elif lane == "kip produce_arrays per-record":
            p.produce_arrays(topic, value_col, keys=key_col, partition=partition,
                             expected_key_offsets=last.copy(), per_record=True,
                             on_delivery=delivered)
        else:  # one report per batch: its base offset gives every record's
            batches.clear()
            p.produce_arrays(topic, value_col, keys=key_col, partition=partition,
                             expected_key_offsets=last.copy(),
                             on_delivery=lambda err, report: batches.append((err, report)))
        if p.flush(120):
            raise RuntimeError(f"{lane}: records left after flush()")
        if lane == "kip produce_arrays":
            [(err, report)] = batches
            if err is not None or report.count != keys:
                raise RuntimeError(f"{lane}: {err} ({report.count} records)")
            last = report.offset() + positions
        if failures:
            raise RuntimeError(f"{lane}: {len(failures)} appends failed, first {failures[0]}")
    seconds = time.perf_counter() - t0
    result = {"seconds": seconds, "cpu": time.process_time() - cpu0,
              "server_cpu": brokers_cpu(pids) - server0, "records": keys * rounds,
              "started": started, "ended": time.time()}
    if writer is not None:
        writer.done()
    p.close()
    return result


def kip_serial(system: str, bootstrap: str, topic: str, keys: int, records: int,
               pids: list[int]) -> dict:
    from kipproducer.errors import KEY_ABSENT

    p = kip_producer(bootstrap, topic, system)
    names = key_names(keys)
    value = os.urandom(VALUE_SIZE)
    last = [KEY_ABSENT] * keys
    out: list = []
    server0, cpu0, t0 = brokers_cpu(pids), time.process_time(), time.perf_counter()
    for n in range(records):
        i = n % keys
        p.produce(topic, value, names[i], partition=0, expected_key_offset=last[i],
                  on_delivery=lambda err, msg: out.append((err, msg.offset())))
        if p.flush(60):
            raise RuntimeError("an append was not acknowledged")
        err, last[i] = out.pop()
        if err is not None:
            raise RuntimeError(f"append {n} failed: {err}")
    result = {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - cpu0,
              "server_cpu": brokers_cpu(pids) - server0, "records": records}
    p.close()
    return result


async def nats_run(address: str, stream: str, keys: int, rounds: int, serial: int,
                   pids: list[int], writer: Writer | None = None) -> dict:
    """JetStream's side, on a stream the parent made: rounds of publish_async (``serial`` 0),
    or ``serial`` publishes one at a time; as one of several writers (``writer``), rounds over
    its share of the subjects."""
    import nats

    names = key_names(keys)
    tag = ""
    if writer is not None:
        names, tag = writer.share(names), f"-{writer.index}"
        keys = len(names)
    nc = await nats.connect(f"nats://{address}")
    js = nc.jetstream(publish_async_max_pending=max(4000, keys))
    await js.publish(f"{stream}.warm-up{tag}", b"warm", headers={EXPECTED_HEADER: "0"})
    await (await js.publish_async(f"{stream}.warm-up-async{tag}", b"warm"))
    subjects = [f"{stream}.{key.decode()}" for key in names]
    value = os.urandom(VALUE_SIZE)
    last = [NATS_ABSENT] * keys
    if writer is not None:
        writer.ready_and_wait()
    server0, cpu0, t0 = brokers_cpu(pids), time.process_time(), time.perf_counter()
    started = time.time()
    if serial:
        for n in range(serial):
            i = n % keys
            ack = await js.publish(subjects[i], value, headers={EXPECTED_HEADER: str(last[i])})
            last[i] = ack.seq
        records = serial
    else:
        publish = js.publish_async
        for _ in range(rounds):
            futures = [await publish(subject, value, headers={EXPECTED_HEADER: str(last[i])})
                       for i, subject in enumerate(subjects)]
            last = [ack.seq for ack in await asyncio.gather(*futures)]
        records = keys * rounds
    result = {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - cpu0,
              "server_cpu": brokers_cpu(pids) - server0, "records": records,
              "started": started, "ended": time.time()}
    if writer is not None:
        writer.done()
    await nc.close()
    return result


# -- the conflict run (two writers, each in a child process) --------------------------------


def conflict_value(writer: int, attempt: int, expected: int) -> bytes:
    """Each attempt's own value, naming the position it was conditioned on."""
    return b"w%d-a%d-e%d" % (writer, attempt, expected)


def expected_of(value: bytes) -> int:
    return int(value.rsplit(b"-e", 1)[1])


def ready_and_wait(ready_dir: str, writer: int) -> None:
    """Say this writer is connected, and wait until both are: then the race starts."""
    open(os.path.join(ready_dir, f"ready-{writer}"), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(ready_dir)) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the other writer never got ready")
        time.sleep(0.005)


def kip_conflict(system: str, bootstrap: str, topic: str, writer: int, keys: int,
                 attempts: int, ready_dir: str) -> dict:
    from kipproducer.errors import KEY_ABSENT, KEY_OFFSET_MISMATCH

    p = kip_producer(bootstrap, topic, system, b"warm-up-%d" % writer)
    names = key_names(keys)
    known = [KEY_ABSENT] * keys
    outcome: dict = {"successes": [], "refusals": [], "errors": []}
    ready_and_wait(ready_dir, writer)
    out: list = []
    for a in range(attempts):
        i = a % keys
        value = conflict_value(writer, a, known[i])
        out.clear()
        p.produce(topic, value, names[i], partition=0, expected_key_offset=known[i],
                  on_delivery=lambda err, msg: out.append((err, msg.offset())))
        if p.flush(60):
            outcome["errors"].append(f"attempt {a}: not acknowledged")
            continue
        [(err, offset)] = out
        if err is None:
            outcome["successes"].append((i, offset, value.decode()))
            known[i] = offset
        elif err.code() == KEY_OFFSET_MISMATCH:
            outcome["refusals"].append((i, known[i], err.actual))
            known[i] = err.actual
        else:
            outcome["errors"].append(f"attempt {a}: {err}")
    p.close()
    return outcome


async def nats_last_seq(js, stream: str, subject: str) -> int:
    """The sequence of the subject's last message (NATS_ABSENT: none)."""
    from nats.js.errors import NotFoundError

    try:
        return (await js.get_last_msg(stream, subject)).seq
    except NotFoundError:
        return NATS_ABSENT


async def nats_conflict(address: str, stream: str, writer: int, keys: int, attempts: int,
                        ready_dir: str) -> dict:
    import nats
    from nats.js.errors import APIError

    nc = await nats.connect(f"nats://{address}")
    js = nc.jetstream()
    subjects = [f"{stream}.{key.decode()}" for key in key_names(keys)]
    known = [NATS_ABSENT] * keys
    outcome: dict = {"successes": [], "refusals": [], "errors": []}
    await js.stream_info(stream)
    ready_and_wait(ready_dir, writer)
    for a in range(attempts):
        i = a % keys
        value = conflict_value(writer, a, known[i])
        try:
            ack = await js.publish(subjects[i], value, headers={EXPECTED_HEADER: str(known[i])})
        except APIError as exc:
            found = re.search(r"wrong last sequence: (\d+)", exc.description or "")
            if exc.err_code == NATS_WRONG_LAST and found:
                actual = int(found.group(1))
            elif exc.err_code == NATS_WRONG_LAST_PENDING:
                # refused without the sequence: the subject's last message, once stored
                actual = await nats_last_seq(js, stream, subjects[i])
            else:
                outcome["errors"].append(f"attempt {a}: {exc}")
                continue
            outcome["refusals"].append((i, known[i], actual))
            known[i] = actual
            continue
        outcome["successes"].append((i, ack.seq, value.decode()))
        known[i] = ack.seq
    await nc.close()
    return outcome


def judge(log: list[tuple[int, bytes, bytes]], writers: list[dict], keys: int,
          absent: int) -> dict:
    """What the log and the writers' reports say: lost, duplicated, written though not
    reported, broken chains, unjustified refusals (see the module's docstring)."""
    names = key_names(keys)
    reported = {value.encode(): (names[i], offset)
                for w in writers for i, offset, value in w["successes"]}
    counts = Counter(value for _, _, value in log)
    where = {value: (key, offset) for offset, key, value in log}
    last: dict[bytes, int] = defaultdict(lambda: absent)
    taken: dict[bytes, set[int]] = defaultdict(set)
    offsets: dict[bytes, set[int]] = defaultdict(set)
    broken = 0
    for offset, key, value in log:
        expected = expected_of(value)
        broken += expected != last[key]
        taken[key].add(expected)
        offsets[key].add(offset)
        last[key] = offset
    refusals = [(names[i], e, actual) for w in writers for i, e, actual in w["refusals"]]
    unjustified = sum(1 for key, e, actual in refusals
                      if e not in taken[key] or actual not in offsets[key] or actual <= e)
    attempts = Counter(names[i] for w in writers for i, *_ in w["successes"] + w["refusals"])
    appended = Counter(key for key, _ in reported.values())
    return {
        "attempts": sum(attempts.values()), "appended": len(reported),
        "refused": len(refusals),
        "expected refusals": sum(attempts[k] - appended[k] for k in attempts),
        "errors": sum(len(w["errors"]) for w in writers), "in log": len(log),
        "lost": sum(1 for value, at in reported.items() if where.get(value) != at),
        "duplicated": sum(c - 1 for c in counts.values() if c > 1),
        "unreported in log": sum(1 for value in counts if value not in reported),
        "broken chains": broken, "unjustified refusals": unjustified,
        "first errors": [e for w in writers for e in w["errors"]][:3],
    }


def verdict_ok(j: dict) -> bool:
    return (j["errors"] == j["lost"] == j["duplicated"] == j["unreported in log"]
            == j["broken chains"] == j["unjustified refusals"] == 0
            and j["refused"] == j["expected refusals"] and j["in log"] == j["appended"])


# -- the parent -----------------------------------------------------------------------------


class Bench:
    """The running servers: where each system's lanes connect and whose CPU is the server's."""

    def __init__(self, systems: list[str], nats_binary: str) -> None:
        self.address: dict[str, str] = {}
        self.pids: dict[str, list[int]] = {}
        self.words: dict[str, str] = {}
        self.replication: dict[str, int] = {}
        self._stops: list = []
        self.where = ""
        try:
            for system in systems:
                if system in NATS:
                    server = NatsServer(nats_binary, 3 if system == "nats3" else 1)
                    self._stops.append(server.stop)
                    self.address[system], self.pids[system] = server.address, server.pids
                    self.words[system] = server.version + (
                        f", {server.replicas} servers in a cluster, streams of "
                        f"{server.replicas} replicas" if server.replicas > 1 else "")
                    self.replication[system] = server.replicas
                    self.where = server.where
                else:
                    broker = start_broker(system, f"kip-bench-keycond-{system}-")
                    self._stops.append(broker.stop)
                    self.address[system], self.pids[system] = broker.bootstrap, broker.pids
                    self.words[system] = broker.words
                    self.replication[system] = broker.replication
                    self.where = broker.data_where
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for stop in reversed(self._stops):
            stop()
        self._stops.clear()


def spawn(*args: str) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                         capture_output=True, text=True, env=child_env(), timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_lane(bench: Bench, system: str, lane: str, name: str, keys: int, rounds: int,
             serial: int) -> dict:
    """One lane's run on a fresh topic / stream, removed afterwards."""
    address, pids = bench.address[system], bench.pids[system]
    with made(bench, system, name):
        return spawn("--one", lane, "--system", system, "--address", address, "--name", name,
                     "--keys", str(keys), "--rounds", str(rounds), "--serial", str(serial),
                     "--pids", ",".join(map(str, pids)))


@contextmanager
def made(bench: Bench, system: str, name: str, partitions: int = 1) -> Iterator[None]:
    """A fresh stream (nats) or topic (kip) for one run, removed afterwards."""
    address = bench.address[system]
    if system in NATS:
        asyncio.run(_nats_admin(address, "add", name, bench.replication[system]))
    else:
        kip_topic(address, name, bench.replication[system], partitions)
    try:
        yield
    finally:
        if system in NATS:
            asyncio.run(_nats_admin(address, "delete", name))
        else:
            kip_delete(address, name)


@contextmanager
def reaped(procs: list[subprocess.Popen], scratch: str) -> Iterator[None]:
    """Child processes still running at the end (one left waiting for another that failed)
    killed, their scratch directory removed."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def _gate_count(gate: str, what: str) -> int:
    return sum(1 for f in os.listdir(gate) if f.startswith(what))


def run_writers(bench: Bench, system: str, lane: str, name: str, keys: int, rounds: int,
                writers: int) -> dict:
    """``writers`` processes on disjoint shares of the aggregates, started together once all
    are connected and warm; timed from the start to the last acknowledgement of the last
    writer, the server's CPU over the same span, the clients' CPU summed."""
    address, pids = bench.address[system], bench.pids[system]
    # the emulation keeps one fenced writer per partition: a partition per writer there;
    # natively the writers share the one partition, as JetStream's share the stream
    partitions = writers if system.startswith("kafka") else 1
    gate = tempfile.mkdtemp(prefix="kip-bench-writers-")
    procs: list[subprocess.Popen] = []
    with made(bench, system, name, partitions), reaped(procs, gate):
        for w in range(writers):
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--one", lane, "--system", system,
                 "--address", address, "--name", name, "--keys", str(keys), "--rounds",
                 str(rounds), "--pids", ",".join(map(str, pids)), "--writer", str(w),
                 "--writer-count", str(writers), "--partition", str(w % partitions),
                 "--gate", gate],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()))

        def wait_for(what: str, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while _gate_count(gate, what) < writers:
                failed = [p for p in procs if p.poll() not in (None, 0)]
                if failed:
                    raise RuntimeError(f"a writer on {system} failed:\n"
                                       f"{failed[0].communicate()[1][-3000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"writers on {system}: not all {what} in {timeout} s")
                time.sleep(0.001)

        wait_for("ready", 300)
        server0 = brokers_cpu(pids)
        open(os.path.join(gate, "go"), "w").close()
        wait_for("done", 1200)
        server = brokers_cpu(pids) - server0
        outs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"a writer on {system} failed:\n{err[-3000:]}")
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return {"seconds": max(o["ended"] for o in outs) - min(o["started"] for o in outs),
                "cpu": sum(o["cpu"] for o in outs), "server_cpu": server,
                "records": sum(o["records"] for o in outs)}


def run_conflict(bench: Bench, system: str, name: str, keys: int, attempts: int) -> dict:
    """Two writers racing on the same keys, then the log judged."""
    address = bench.address[system]
    ready_dir = tempfile.mkdtemp(prefix="kip-bench-race-")
    procs: list[subprocess.Popen] = []
    with made(bench, system, name), reaped(procs, ready_dir):
        for writer in (1, 2):
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--conflict", str(writer),
                 "--system", system, "--address", address, "--name", name, "--keys",
                 str(keys), "--attempts", str(attempts), "--ready-dir", ready_dir],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()))
        writers = []
        for proc in procs:
            out, err = proc.communicate(timeout=1200)
            if proc.returncode != 0:
                raise RuntimeError(f"conflict writer on {system} failed:\n{err[-3000:]}")
            writers.append(json.loads(out.strip().splitlines()[-1]))
        if system in NATS:
            log, absent = asyncio.run(_nats_log(address, name)), NATS_ABSENT
        else:
            from kipproducer.errors import KEY_ABSENT

            log, absent = kip_log(address, name), KEY_ABSENT
        log = [entry for entry in log if not entry[1].startswith(b"warm")]
        return judge(log, writers, keys, absent)


def child(args) -> None:
    pids = [int(p) for p in args.pids.split(",") if p]
    writer = (Writer(args.writer, args.writer_count, args.partition, args.gate)
              if args.writer_count else None)
    if args.conflict:
        if args.system in NATS:
            out = asyncio.run(nats_conflict(args.address, args.name, args.conflict, args.keys,
                                            args.attempts, args.ready_dir))
        else:
            out = kip_conflict(args.system, args.address, args.name, args.conflict, args.keys,
                               args.attempts, args.ready_dir)
    elif args.system in NATS:
        out = asyncio.run(nats_run(args.address, args.name, args.keys, args.rounds,
                                   args.serial, pids, writer))
    elif args.serial:
        out = kip_serial(args.system, args.address, args.name, args.keys, args.serial, pids)
    else:
        out = kip_rounds(args.one, args.system, args.address, args.name, args.keys,
                         args.rounds, pids, writer)
    print(json.dumps(out))


def rate_of(run: dict) -> float:
    return run["records"] / run["seconds"]


def rate_cell(runs: list[dict]) -> tuple[float, float, float]:
    """Median records/s, client CPU and server CPU in microseconds per record."""
    n = runs[0]["records"]
    return (n / statistics.median(r["seconds"] for r in runs),
            statistics.median(r["cpu"] for r in runs) * 1e6 / n,
            statistics.median(r["server_cpu"] for r in runs) * 1e6 / n)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1000, help="aggregates (keys / subjects)")
    ap.add_argument("--records", type=int, default=100_000,
                    help="events per lane run (rounds of --keys)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--serial-records", type=int, default=500,
                    help="events of the one-at-a-time table (0: none)")
    ap.add_argument("--conflict-keys", type=int, default=10)
    ap.add_argument("--conflict-attempts", type=int, default=200,
                    help="appends per writer of the conflict run (0: none)")
    ap.add_argument("--writers", type=int, default=4,
                    help="writers of the several-writers table (0: none)")
    ap.add_argument("--systems", default="kip,kafka1,nats")
    ap.add_argument("--nats-server", default="nats-server", metavar="PATH")
    ap.add_argument("--write", metavar="PATH")
    for hidden in ("--one", "--system", "--address", "--name", "--pids", "--ready-dir",
                   "--gate"):
        ap.add_argument(hidden, default="", help=argparse.SUPPRESS)
    for hidden in ("--rounds", "--serial", "--conflict", "--attempts", "--writer",
                   "--writer-count", "--partition"):
        ap.add_argument(hidden, type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.system:
        child(args)
        return
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; known: {sorted(SYSTEMS)}")
    rounds = max(1, args.records // args.keys)
    load0 = load_average()
    bench = Bench(systems, args.nats_server)
    results: dict[tuple[str, str], list[dict]] = defaultdict(list)
    conflicts: dict[str, dict] = {}
    try:
        for rnd in range(args.repeat):
            for system in systems:  # alternating, so drift hits everyone alike
                for lane in LANES[system]:
                    name = f"kc{rnd}-{system}-{LANES[system].index(lane)}"
                    got = run_lane(bench, system, lane, name, args.keys, rounds, 0)
                    results[(system, lane)].append(got)
                    print(f"round {rnd}: {SYSTEMS[system]:34s} {lane:30s} "
                          f"{got['records'] / got['seconds']:10,.0f} rec/s", file=sys.stderr)
                if args.writers:
                    lane = WRITERS_LANE[system]
                    got = run_writers(bench, system, lane, f"kc{rnd}-{system}-writers",
                                      args.keys, rounds, args.writers)
                    results[(system, "writers")].append(got)
                    print(f"round {rnd}: {SYSTEMS[system]:34s} {args.writers} writers, {lane:20s}"
                          f"{got['records'] / got['seconds']:10,.0f} rec/s", file=sys.stderr)
                if args.serial_records:
                    lane = SERIAL_LANE[system]
                    got = run_lane(bench, system, lane, f"kc{rnd}-{system}-serial", args.keys,
                                   0, args.serial_records)
                    results[(system, "serial")].append(got)
                    print(f"round {rnd}: {SYSTEMS[system]:34s} {lane:30s} "
                          f"{got['records'] / got['seconds']:10,.0f} rec/s", file=sys.stderr)
        if args.conflict_attempts:
            for system in systems:
                conflicts[system] = run_conflict(bench, system, f"kc-race-{system}",
                                                 args.conflict_keys, args.conflict_attempts)
                print(f"conflict run {SYSTEMS[system]}: {conflicts[system]}", file=sys.stderr)
    finally:
        bench.stop()
    section = report(args, systems, bench, rounds, results, conflicts, load0)
    print(section)
    bad = [s for s, j in conflicts.items() if not verdict_ok(j)]
    if args.write:
        from results_file import replace_section

        replace_section(args.write, HEADING, section)
    if bad:
        raise SystemExit(f"the conflict run found problems on {', '.join(bad)}")


def peer_of(system: str, systems: list[str]) -> str | None:
    """The JetStream a system is compared with: itself for one; the 3-server cluster for the
    3-node Kafka when the run has one; else the one server (None: no JetStream in the run)."""
    if system in NATS:
        return system
    if system == "kafka3" and "nats3" in systems:
        return "nats3"
    return "nats" if "nats" in systems else None


def peer_rate(systems: list[str], results: dict, system: str, kind: str) -> float:
    peer = peer_of(system, systems)
    return float("nan") if peer is None else rate_cell(results[(peer, kind)])[0]


def lane_table(systems: list[str], results: dict, kind: str, lanes: dict[str, str]) -> list[str]:
    """The rows of a one-lane-per-system table (``kind``: "writers" or "serial")."""
    rows = ["| system | lane | events/s | client CPU us/event | server CPU us/event | "
            "vs JetStream |", "|---|---|---:|---:|---:|---:|"]
    for system in systems:
        rate, cpu, server = rate_cell(results[(system, kind)])
        rows.append(f"| {SYSTEMS[system]} | {lanes[system]} | {rate:,.0f} | {cpu:.1f} | "
                    f"{server:.1f} | {rate / peer_rate(systems, results, system, kind):.2f}x |")
    return rows


def report(args, systems: list[str], bench: Bench, rounds: int, results: dict,
           conflicts: dict, load0: str) -> str:
    from importlib.metadata import version

    from results_file import machine

    n = rounds * args.keys
    flags = "".join(f" --{name.replace('_', '-')} {getattr(args, name)}"
                    for name, default in (("keys", 1000), ("records", 100_000), ("repeat", 3),
                                          ("serial_records", 500), ("writers", 4),
                                          ("conflict_keys", 10),
                                          ("conflict_attempts", 200),
                                          ("systems", "kip,kafka1,nats"),
                                          ("nats_server", "nats-server"))
                    if getattr(args, name) != default)
    servers = "; ".join(f"{SYSTEMS[s]}: {bench.words[s]}" for s in systems)
    lines = [
        HEADING, "",
        f"Command: `python bench/side_by_side_key_conditional.py{flags}` (median of "
        f"{args.repeat} round{'s' if args.repeat > 1 else ''}, lanes alternating within each "
        "round, one process per run).",
        f"Machine: {machine()}; the clients and every server share it, on loopback, the "
        f"servers all running for the whole bench, their data {bench.where}. /proc/loadavg "
        f"before: {load0}; after: {load_average()}.",
        f"Versions: {versions()}, nats-py {version('nats-py')}; {servers}.",
        f"Workload: {args.keys:,} aggregates (kip: keys of one partition of a topic with "
        "retention.ms=-1; JetStream: subjects of one file-storage stream, 1 replica, or 3 on "
        "the 3-server cluster), one "
        f"writer, {rounds:,} rounds of one {VALUE_SIZE}-byte event per aggregate "
        f"({n:,} events per run), each conditioned on the position the previous round's "
        "acknowledgement gave that aggregate (kip: acks=all, enable.idempotence=true, "
        "linger.ms=5). Timed from the first call to the last acknowledgement; client CPU is "
        "the lane's process (all threads), server CPU every thread of the server process "
        "over the same span. A kip call's records of a partition are appended together or "
        "not at all (natively, separate produce() calls sharing a batch too); JetStream's "
        "publishes are independent (its atomic batch publish, nats-server 2.12 on, is no lane: "
        "nats-py has no call for it). vs JetStream: against the one server's lane, the "
        "3-node Kafka's against the 3-server cluster's when the run has one.",
        "",
        "| system | lane | events/s | client CPU us/event | server CPU us/event | "
        "vs JetStream |",
        "|---|---|---:|---:|---:|---:|",
    ]
    best: dict[str, float] = {}
    for system in systems:
        theirs = peer_rate(systems, results, system, "nats publish_async")
        for lane in LANES[system]:
            rate, cpu, server = rate_cell(results[(system, lane)])
            best[system] = max(best.get(system, 0.0), rate)
            lines.append(f"| {SYSTEMS[system]} | {lane} | {rate:,.0f} | {cpu:.1f} | "
                         f"{server:.1f} | {rate / theirs:.2f}x |")
    if args.writers:
        lines += ["", f"{args.writers} writers at once, each a process of its own with a "
                  f"disjoint share of the {args.keys:,} aggregates (one in {args.writers}, "
                  "interleaved), "
                  f"the same {rounds:,} rounds ({n:,} events in all), started together once "
                  "every writer was connected and warm, timed to the last writer's last "
                  "acknowledgement (client CPU: the writers' summed). kip native: the writers "
                  "share the one partition (the broker checks each key); kip emulated: a "
                  "partition per writer (the emulation keeps one fenced writer per partition); "
                  "JetStream: the writers share the stream.", ""]
        lines += lane_table(systems, results, "writers", WRITERS_LANE)
    if args.serial_records:
        lines += ["", f"One at a time ({args.serial_records:,} events over the same "
                  f"{args.keys:,} aggregates, each waiting for its acknowledgement):", ""]
        lines += lane_table(systems, results, "serial", SERIAL_LANE)
    if any(s in NATS for s in systems):
        lines.append("")
        for system, target in (("kip", 2.0), ("kafka1", 1.0), ("kafka3", 1.0)):
            peer = peer_of(system, systems)
            if system in best and peer is not None:
                nats_runs = results[(peer, LANES[peer][0])]
                against = SYSTEMS[peer].replace("NATS ", "")
                # within each round (its lanes ran one after another): the system's best lane
                # over publish_async, so drift across rounds cancels out
                ratios = [max(rate_of(results[(system, lane)][r]) for lane in LANES[system])
                          / rate_of(run) for r, run in enumerate(nats_runs)]
                ratio = statistics.median(ratios)
                lines.append(f"Issue 44's target, {SYSTEMS[system]} >= {target:g}x {against} "
                             "(the best lane over publish_async within each round: "
                             + ", ".join(f"{x:.2f}x" for x in ratios) + f"): median "
                             f"{ratio:.2f}x ({'met' if ratio >= target else 'NOT met'}).")
                if not args.writers:
                    continue
                ratios = [rate_of(run) / rate_of(theirs) for run, theirs in
                          zip(results[(system, "writers")], results[(peer, "writers")],
                              strict=True)]
                ratio = statistics.median(ratios)
                lines.append(f"The same with {args.writers} writers ({WRITERS_LANE[system]} "
                             "over publish_async within each round: "
                             + ", ".join(f"{x:.2f}x" for x in ratios) + f"): median "
                             f"{ratio:.2f}x ({'met' if ratio >= target else 'NOT met'}).")
    if conflicts:
        lines += ["", f"Conflict run: 2 writers, {args.conflict_keys} aggregates, "
                  f"{args.conflict_attempts} appends each, one at a time, the same keys in the "
                  "same order; the log read back (kip: read_committed) and judged:", "",
                  "| system | attempts | appended | refused | expected refusals | lost | "
                  "duplicated | written unreported | broken chains | unjustified refusals | "
                  "errors | verdict |", "|---|" + "---:|" * 10 + "---|"]
        for system, j in conflicts.items():
            lines.append(
                f"| {SYSTEMS[system]} | {j['attempts']} | {j['appended']} | {j['refused']} | "
                f"{j['expected refusals']} | {j['lost']} | {j['duplicated']} | "
                f"{j['unreported in log']} | {j['broken chains']} | "
                f"{j['unjustified refusals']} | {j['errors']} | "
                f"{'ok' if verdict_ok(j) else 'FAILED ' + str(j['first errors'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
