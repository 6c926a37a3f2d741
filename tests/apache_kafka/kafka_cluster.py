"""A real Apache Kafka cluster for the tests: 1 or 3 combined broker+controller KRaft nodes,
each its own JVM on free 127.0.0.1 ports, from the jars kafka_jars.py caches.

    with KafkaCluster(tmp_path, nodes=3) as cluster:
        cluster.create_topic("orders", partitions=6)
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(cluster.leader("orders", 0))      # kill -9
        cluster.restart(node_id)                         # back, and in sync again

Every node gets a bounded heap, the serial collector and WARN-level logging to its own file
(``node-N/kafka.log``); a test that fails prints the tail of every node's log. Nodes are
stopped by PID: ``kill`` sends SIGKILL, ``shutdown`` SIGTERM (Kafka's controlled shutdown,
which moves leadership away first). Fast-failover settings: a dead node is fenced after
``broker.session.timeout.ms`` (3 s here, 9 s by default), and a lagging follower leaves the
ISR after ``replica.lag.time.max.ms`` (5 s here, 30 s by default).

Optional listeners, each on its own port per node: ``tls`` (a trustme CA; PEM keystores),
``sasl`` (SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256/512 users made at format time, and
unsecured OAUTHBEARER). ``transaction_version`` 2 (Kafka 4.x's default, KIP-890's second
part) or 0 (the classic protocol), set when the storage is formatted.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka_jars import classpath as kafka_classpath
from kafka_jars import java

STARTUP_TIMEOUT_S = 120.0
NODE_HEAP = ["-Xms128m", "-Xmx512m"]
TOOL_HEAP = ["-Xms64m", "-Xmx256m"]
JVM_FLAGS = ["-XX:+UseSerialGC", "-Djava.awt.headless=true"]
# A tool's JVM lives a few seconds: the client compiler alone starts it fastest.
TOOL_FLAGS = ["-XX:TieredStopAtLevel=1", "-Xshare:auto"]

LOG4J2 = """status = error
appender.f.type = File
appender.f.name = FILE
appender.f.fileName = {path}
appender.f.layout.type = PatternLayout
appender.f.layout.pattern = [%d] %p %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.f.ref = FILE
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""
TOOL_LOG4J2 = """status = error
appender.e.type = Console
appender.e.name = ERR
appender.e.target = SYSTEM_ERR
appender.e.layout.type = PatternLayout
appender.e.layout.pattern = %p %c{1}: %m%n
rootLogger.level = error
rootLogger.appenderRef.e.ref = ERR
"""

# The harness's own admin clients: a node that is down is expected, not worth a log line.
QUIET = {"log_level": 0}

# Settings every node shares; per-cluster ones (replication) are added in _server_properties.
BASE_CONFIG: dict[str, Any] = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "num.partitions": 1,
    "auto.create.topics.enable": False,
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 5000,
    "unclean.leader.election.enable": False,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "log.cleaner.dedupe.buffer.size": 2 * 1024 * 1024,
    "num.network.threads": 2,
    "num.io.threads": 2,
    "background.threads": 2,
    "num.recovery.threads.per.data.dir": 1,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``."""
    h = 0
    data = text.encode("utf-16-be")   # Java hashes UTF-16 code units
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _properties(config: dict[str, Any]) -> str:
    def text(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return "".join(f"{k}={text(v)}\n" for k, v in config.items())


@dataclass
class KafkaNode:
    node_id: int
    ports: dict[str, int]
    root: Path
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "kafka.log"

    @property
    def config_path(self) -> Path:
        return self.root / "server.properties"

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Security:
    """What the optional listeners need: the CA and the broker's PEM files, SCRAM users."""
    ca_pem: Path | None = None
    broker_pem: Path | None = None        # PKCS#8 key + certificate chain, one file
    scram_users: dict[str, str] = field(default_factory=dict)
    plain_users: dict[str, str] = field(default_factory=dict)


class KafkaCluster:
    def __init__(self, root: Path, nodes: int = 3, *, transaction_version: int = 2,
                 tls: bool = False, sasl: bool = False, config: dict[str, Any] | None = None,
                 scram_users: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.size = nodes
        self.transaction_version = transaction_version
        self.extra_config = dict(config or {})
        self.cluster_id = ""
        self.security = Security(scram_users=dict(scram_users or {}))
        listeners = ["PLAINTEXT", "CONTROLLER"] + (["SSL"] if tls else []) + (
            ["SASL_PLAINTEXT"] if sasl else [])
        self.listeners = listeners
        self.nodes = {i: KafkaNode(i, {name: free_port() for name in listeners},
                                   self.root / f"node-{i}") for i in range(1, nodes + 1)}
        self.ca: Any = None
        if tls:
            self._make_certificates()
        if sasl:
            self.security.plain_users.setdefault("admin", "admin-secret")
            self.security.scram_users.setdefault("alice", "alice-secret")
        self._log4j = self.root / "log4j2-node.properties"
        self._tool_log4j = self.root / "log4j2-tool.properties"
        self._tool_log4j.write_text(TOOL_LOG4J2)
        self._admin: AdminClient | None = None
        self._settle = ""

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.cluster_id = self.tool("kafka.tools.StorageTool", "random-uuid").strip()
        for node in self.nodes.values():
            node.root.mkdir(parents=True, exist_ok=True)
            node.config_path.write_text(_properties(self._server_properties(node)))
            self._format(node)
        for node in self.nodes.values():
            self._spawn(node)
        self.wait_ready(set(self.nodes))

    def close(self) -> None:
        self._admin = None
        for node in self.nodes.values():
            if node.alive:
                assert node.proc is not None
                node.proc.kill()
                node.proc.wait(30)

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_for("PLAINTEXT")

    def bootstrap_for(self, listener: str) -> str:
        return ",".join(n.address(listener) for n in self.nodes.values())

    # -- configuration ----------------------------------------------------------------

    def _server_properties(self, node: KafkaNode) -> dict[str, Any]:
        rf = min(3, self.size)
        protocols = {name: name for name in self.listeners}
        protocols["CONTROLLER"] = "PLAINTEXT"
        config: dict[str, Any] = {
            **BASE_CONFIG,
            "node.id": node.node_id,
            "listeners": ",".join(f"{name}://{node.address(name)}" for name in self.listeners),
            "advertised.listeners": ",".join(f"{name}://{node.address(name)}"
                                             for name in self.listeners if name != "CONTROLLER"),
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocols.items()),
            "controller.quorum.voters": ",".join(
                f"{n.node_id}@{n.address('CONTROLLER')}" for n in self.nodes.values()),
            "log.dirs": node.data_dir,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min(2, rf),
            "default.replication.factor": rf,
            "min.insync.replicas": min(2, rf),
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min(2, rf),
        }
        if "SSL" in self.listeners:
            sec = self.security
            config.update({
                "listener.name.ssl.ssl.keystore.type": "PEM",
                "listener.name.ssl.ssl.keystore.location": sec.broker_pem,
                "listener.name.ssl.ssl.truststore.type": "PEM",
                "listener.name.ssl.ssl.truststore.location": sec.ca_pem,
                "listener.name.ssl.ssl.client.auth": "requested",
            })
        if "SASL_PLAINTEXT" in self.listeners:
            users = " ".join(f'user_{u}="{p}"' for u, p in self.security.plain_users.items())
            admin_pw = self.security.plain_users["admin"]
            prefix = "listener.name.sasl_plaintext"
            config.update({
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
                f"{prefix}.plain.sasl.jaas.config":
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="admin" password="{admin_pw}" {users};',
                f"{prefix}.scram-sha-256.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                f"{prefix}.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                f"{prefix}.oauthbearer.sasl.jaas.config":
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    'required unsecuredLoginStringClaim_sub="admin";',
            })
        config.update(self.extra_config)
        return config

    def _make_certificates(self) -> None:
        import trustme
        from cryptography.hazmat.primitives import serialization
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        ca_pem = self.root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(ca_pem))
        broker_pem = self.root / "broker.pem"
        # Kafka's PEM keystore reads PKCS#8 keys only ("BEGIN PRIVATE KEY"); trustme writes
        # the key in OpenSSL's traditional form.
        key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
        pkcs8 = key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
        broker_pem.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        self.security.ca_pem = ca_pem
        self.security.broker_pem = broker_pem

    def _format(self, node: KafkaNode) -> None:
        args = ["format", "-t", self.cluster_id, "-c", str(node.config_path),
                "--feature", f"transaction.version={self.transaction_version}"]
        for user, password in self.security.scram_users.items():
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                args += ["--add-scram", f"{mech}=[name={user},password={password}]"]
        self.tool("kafka.tools.StorageTool", *args)

    # -- processes --------------------------------------------------------------------

    def _spawn(self, node: KafkaNode) -> None:
        assert not node.alive, f"node {node.node_id} is already running"
        self._log4j.write_text(LOG4J2.replace("{path}", "${sys:kip.node.log}"))
        node.starts += 1
        with open(node.root / "stdout.log", "ab") as out:
            node.proc = subprocess.Popen(
                [java() or "java", *NODE_HEAP, *JVM_FLAGS,
                 f"-Dlog4j2.configurationFile={self._log4j}",
                 f"-Dkip.node.log={node.log_path}", f"-Dkafka.logs.dir={node.root}",
                 "-cp", kafka_classpath(), "kafka.Kafka", str(node.config_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def kill(self, node_id: int) -> None:
        """kill -9: no controlled shutdown, the controller notices after the session timeout."""
        node = self.nodes[node_id]
        assert node.proc is not None and node.alive, f"node {node_id} is not running"
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(30)

    def shutdown(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGTERM: Kafka's controlled shutdown (leadership moved away first)."""
        node = self.nodes[node_id]
        assert node.proc is not None and node.alive, f"node {node_id} is not running"
        node.proc.send_signal(signal.SIGTERM)
        node.proc.wait(timeout)

    def restart(self, node_id: int, *, wait_in_sync: bool = True) -> None:
        """Starts a stopped node again and waits until it is registered (and, by default,
        back in the ISR of every partition it replicates)."""
        node = self.nodes[node_id]
        self._spawn(node)
        self.wait_ready({node_id})
        if wait_in_sync:
            self.wait_in_sync()

    def rolling_restart(self) -> None:
        for node_id in self.nodes:
            self.shutdown(node_id)
            self.restart(node_id)

    def pids(self) -> dict[int, int]:
        return {i: n.proc.pid for i, n in self.nodes.items() if n.proc is not None and n.alive}

    # -- readiness --------------------------------------------------------------------

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap,
                                       "socket.timeout.ms": 5000, **QUIET})
        return self._admin

    def live_brokers(self) -> set[int]:
        md = self.admin().list_topics(timeout=5)
        return set(md.brokers)

    def wait_ready(self, node_ids: set[int], timeout: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            for i in node_ids:
                if not self.nodes[i].alive:
                    raise RuntimeError(f"Apache Kafka node {i} exited while starting:\n"
                                       + self.log_tail(i))
            try:
                # each node answers on its own listener, and the cluster knows it
                for i in node_ids:
                    probe = AdminClient({"bootstrap.servers": self.nodes[i].address(),
                                         "socket.timeout.ms": 3000, **QUIET})
                    if i not in probe.list_topics(timeout=3).brokers:
                        raise RuntimeError(f"node {i} is not registered yet")
                if node_ids <= self.live_brokers():
                    return
            except (KafkaException, RuntimeError) as exc:
                last = exc
            time.sleep(0.3)
        raise TimeoutError(f"Apache Kafka nodes {sorted(node_ids)} not ready in {timeout} s "
                           f"({last})\n" + "\n".join(self.log_tail(i) for i in node_ids))

    def wait_in_sync(self, timeout: float = 60.0, topics: Iterable[str] | None = None) -> None:
        """Until every partition (of ``topics``, or of every topic) has all its replicas in
        its ISR."""
        deadline = time.monotonic() + timeout
        lagging: list[str] = []
        while time.monotonic() < deadline:
            md = self.admin().list_topics(timeout=5)
            lagging = [f"{t}/{p}" for t, tm in md.topics.items()
                       if topics is None or t in topics
                       for p, pm in tm.partitions.items() if set(pm.isrs) != set(pm.replicas)]
            if not lagging:
                return
            time.sleep(0.3)
        raise TimeoutError(f"partitions not in sync after {timeout} s: {lagging[:10]}")

    def settle(self) -> None:
        """Before a timed run: every node up, every partition in sync, and a new idempotent
        producer served at once. A node just restarted can answer a producer id request with
        COORDINATOR_LOAD_IN_PROGRESS for a while, which would be charged to whichever client
        runs next."""
        self.wait_in_sync()
        warm = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                         "acks": "all", **QUIET})
        for _ in range(3):
            warm.produce(self._settle_topic(), b"settle")
        left = warm.flush(60)
        assert left == 0, "the cluster did not take an idempotent produce in 60 s"

    def _settle_topic(self) -> str:
        if not self._settle:
            self._settle = self.unique_topic("settle", self.size)
        return self._settle

    def log_tail(self, node_id: int, lines: int = 30) -> str:
        node = self.nodes[node_id]
        text = []
        for path in (node.root / "stdout.log", node.log_path):
            if path.exists():
                text += [line[:300] for line in
                         path.read_text(errors="replace").splitlines()[-lines:]]
        return f"--- node {node_id} ---\n" + "\n".join(text)

    # -- topics and leaders -----------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication: int | None = None,
                     config: dict[str, str] | None = None) -> str:
        rf = replication if replication is not None else min(3, self.size)
        futures = self.admin().create_topics(
            [NewTopic(name, partitions, rf, config=config or {})], operation_timeout=30)
        futures[name].result(60)
        self.wait_leaders(name, partitions)
        return name

    def unique_topic(self, prefix: str, partitions: int = 1, **kw: Any) -> str:
        return self.create_topic(f"{prefix}-{uuid.uuid4().hex[:8]}", partitions, **kw)

    def partitions(self, topic: str, timeout: float = 30.0) -> dict[int, Any]:
        """The topic's partitions as the cluster's metadata has them. A node just restarted
        may answer with metadata that lags (the topic unknown, or without leaders): asked
        again until an answer is whole."""
        deadline = time.monotonic() + timeout
        while True:
            md = self.admin().list_topics(topic, timeout=5)
            tm = md.topics.get(topic)
            if tm is not None and tm.error is None and tm.partitions:
                return dict(tm.partitions)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no whole metadata for {topic} in {timeout} s: {tm}")
            time.sleep(0.2)

    def leader(self, topic: str, partition: int) -> int:
        return self.partitions(topic)[partition].leader

    def leaders(self, topic: str) -> dict[int, int]:
        return {p: pm.leader for p, pm in self.partitions(topic).items()}

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node coordinating ``transactional_id``: the leader of the __transaction_state
        partition the id hashes to (Kafka's ``abs(id.hashCode()) % partitions``)."""
        h = java_string_hash(transactional_id)
        partitions = BASE_CONFIG["transaction.state.log.num.partitions"]
        return self.leader("__transaction_state", (0 if h == -(1 << 31) else abs(h)) % partitions)

    def active_controller(self) -> int:
        """The KRaft quorum's leader (the active controller), as kafka-metadata-quorum tells."""
        out = self.tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                        self.bootstrap, "describe", "--status")
        for line in out.splitlines():
            name, _, found = line.partition(":")
            if name.strip() == "LeaderId":
                return int(found)
        raise RuntimeError(f"no LeaderId in kafka-metadata-quorum's answer:\n{out}")

    def wait_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic, timeout=5)
                if len(parts) == partitions and all(pm.leader >= 0 for pm in parts.values()):
                    return
            except (KafkaException, TimeoutError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{topic}: no leader for every partition in {timeout} s")

    def wait_partition_count_on_every_node(self, topic: str, partitions: int,
                                           timeout: float = 30.0) -> None:
        """Until every live node's metadata gives ``topic`` that many partitions (a change
        reaches the nodes one by one)."""
        deadline = time.monotonic() + timeout
        for node in self.nodes.values():
            if not node.alive:
                continue
            probe = AdminClient({"bootstrap.servers": node.address(), **QUIET})
            while True:
                tm = probe.list_topics(topic, timeout=5).topics.get(topic)
                if tm is not None and tm.error is None and len(tm.partitions) == partitions:
                    break
                assert time.monotonic() < deadline, (
                    f"node {node.node_id}: {topic} not at {partitions} partitions in {timeout} s")
                time.sleep(0.1)

    def wait_leader_not(self, topic: str, partition: int, node_id: int,
                        timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader(topic, partition)
            if leader not in (node_id, -1):
                return leader
            time.sleep(0.1)
        raise TimeoutError(f"{topic}/{partition} still led by {node_id} after {timeout} s")

    def reassign(self, moves: dict[tuple[str, int], list[int]], wait: bool = True) -> None:
        """Kafka's own kafka-reassign-partitions: each partition's replicas become the given
        list (the first is the preferred leader)."""
        plan = {"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": replicas}
            for (t, p), replicas in moves.items()]}
        path = self.root / f"reassign-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(plan))
        self.tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                  "--bootstrap-server", self.bootstrap, "--reassignment-json-file", str(path),
                  "--execute")
        if wait:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                out = self.tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                                "--bootstrap-server", self.bootstrap,
                                "--reassignment-json-file", str(path), "--verify")
                if "is still in progress" not in out:
                    return
                time.sleep(0.5)
            raise TimeoutError(f"reassignment {moves} still in progress after 60 s")

    def elect_preferred(self, topic: str, partitions: Iterable[int]) -> None:
        """Kafka's own kafka-leader-election --election-type preferred."""
        path = self.root / f"elect-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps({"partitions": [
            {"topic": topic, "partition": p} for p in partitions]}))
        self.tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server",
                  self.bootstrap, "--election-type", "preferred", "--path-to-json-file",
                  str(path), check=False)

    def move_leaders(self, topic: str, targets: dict[int, int]) -> None:
        """Makes ``targets[p]`` partition p's leader: each replica list reordered with it first
        (one reassignment that moves no data), then one preferred election."""
        parts = self.partitions(topic)
        moves = {}
        for p, node in targets.items():
            replicas = list(parts[p].replicas)
            assert node in replicas, (topic, p, replicas, node)
            moves[(topic, p)] = [node] + [r for r in replicas if r != node]
        self.reassign(moves)
        self.elect_preferred(topic, targets)
        deadline = time.monotonic() + 30
        while any(self.leader(topic, p) != node for p, node in targets.items()):
            assert time.monotonic() < deadline, f"{topic}: leaders did not move to {targets}"
            time.sleep(0.1)

    def topic_config(self, topic: str) -> dict[str, str]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = self.admin().describe_configs([res])[res].result(30)
        return {k: v.value for k, v in configs.items()}

    def finalized_features(self) -> str:
        return self.tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                         self.bootstrap, "describe")

    # -- Kafka's own tools ------------------------------------------------------------

    def tool(self, main: str, *args: str, check: bool = True, timeout: float = 120.0,
             input_text: str | None = None, classpath: str | None = None) -> str:
        """Runs one of Kafka's Java tools (its main class), returns what it printed."""
        proc = subprocess.run(
            [java() or "java", *TOOL_HEAP, *JVM_FLAGS, *TOOL_FLAGS,
             f"-Dlog4j2.configurationFile={self._tool_log4j}", "-cp",
             classpath or kafka_classpath(), main, *args],
            capture_output=True, text=True, timeout=timeout, input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{main} {' '.join(args)} exited {proc.returncode}:\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

