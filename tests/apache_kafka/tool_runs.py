"""Kafka's command-line tools run against two brokers at once, and their output made
comparable: the conformance tests run each command on Apache Kafka and on ``kip broker`` and
compare what both printed.

Many commands share one JVM (java/RunTools.java): a JVM start costs seconds on a loaded
machine, and a test compares dozens of commands. ``{bs}`` in a command stands for the
broker's bootstrap address, ``{node}`` for its node id, ``{dir}`` for a scratch directory.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kafka_cluster import JVM_FLAGS, TOOL_FLAGS, TOOL_HEAP, TOOL_LOG4J2
from kafka_jars import JAVA_DIR, compiled_classpath, java
from kafka_jars import classpath as kafka_classpath

# The tools' log configuration with a console appender that follows System.setErr, so that
# each command's log lines land in that command's stderr.
BATCH_LOG4J2 = TOOL_LOG4J2.replace("appender.e.target = SYSTEM_ERR\n",
                                   "appender.e.target = SYSTEM_ERR\nappender.e.follow = true\n")
assert "follow" in BATCH_LOG4J2

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "kafka.admin.ConfigCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"


@dataclass(frozen=True)
class Target:
    """One broker the commands run against."""

    name: str  # "kafka" or "kip"
    bootstrap: str
    node: str
    scratch: Path

    def fill(self, word: str) -> str:
        return (word.replace("{bs}", self.bootstrap).replace("{node}", self.node)
                .replace("{dir}", str(self.scratch)))


@dataclass(frozen=True)
class Run:
    command: tuple[str, ...]
    exit: int
    out: str
    err: str

    @property
    def text(self) -> str:
        """stdout then stderr, as a user sees them in a terminal."""
        return self.out + self.err


def run_batch(target: Target, commands: list[tuple[str, ...]], timeout: float = 180.0,
              ) -> list[Run]:
    """Runs ``commands`` (each: main class, then arguments) one after another in one JVM."""
    filled = [tuple(target.fill(w) for w in command) for command in commands]
    for command in filled:
        assert not any("\t" in w or "\n" in w for w in command), command
    log4j = target.scratch / "log4j2-batch.properties"
    log4j.write_text(BATCH_LOG4J2)
    proc = subprocess.run(
        [java() or "java", *TOOL_HEAP, *JVM_FLAGS, *TOOL_FLAGS,
         f"-Dlog4j2.configurationFile={log4j}", "-cp",
         compiled_classpath(JAVA_DIR / "RunTools.java"), "RunTools"],
        input="".join("\t".join(c) + "\n" for c in filled), capture_output=True, text=True,
        timeout=timeout)
    parts = re.split(r"^==== (\d+|end)(?: exit=(-?\d+))?\n", proc.stdout, flags=re.M)
    runs: list[Run] = []
    for index, code, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if index == "end":
            break
        out, _, err = body.partition("---- stderr\n")
        # A tool's main that catches Throwable prints the exception RunTools' exit procedure
        # throws (a message of null, the class name) before it exits for real.
        out, err = (text.replace("null\nRunTools$Exited\n", "") for text in (out, err))
        runs.append(Run(filled[int(index)], int(code), out, err))
    if len(runs) != len(filled):
        raise RuntimeError(f"RunTools ran {len(runs)} of {len(filled)} commands on "
                           f"{target.name} (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return runs


def spawn(target: Target, main: str, *args: str, name: str) -> subprocess.Popen:
    """One of Kafka's Java clients as its own process (a test kills it, or runs several), its
    output in ``<scratch>/<name>.out`` (read it with :func:`events`)."""
    log4j = target.scratch / "log4j2-batch.properties"
    log4j.write_text(BATCH_LOG4J2)
    out = target.scratch / f"{name}.out"
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [java() or "java", *TOOL_HEAP, *JVM_FLAGS, *TOOL_FLAGS,
             f"-Dlog4j2.configurationFile={log4j}", "-cp", kafka_classpath(), main,
             *(target.fill(a) for a in args)],
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)


def events(target: Target, name: str) -> list[dict]:
    """The JSON lines a spawned client (VerifiableConsumer, TransactionalMessageCopier) has
    printed so far; other lines (log lines) are skipped."""
    path = target.scratch / f"{name}.out"
    found = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line being written
    return found


def run_both(kafka: Target, kip: Target, commands: list[tuple[str, ...]],
             ) -> tuple[list[Run], list[Run]]:
    """The same commands on both brokers, the two JVMs side by side."""
    with ThreadPoolExecutor(2) as pool:
        on_kafka = pool.submit(run_batch, kafka, commands)
        on_kip = pool.submit(run_batch, kip, commands)
        return on_kafka.result(), on_kip.result()


# -- making two outputs comparable ------------------------------------------------------------

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TOPIC_ID = re.compile(r"\b(TopicId:\s*)[A-Za-z0-9_-]{22}\b")
_ADDRESS = re.compile(r"/?(?:127\.0\.0\.1|localhost)(?::\d+)?")
_CONFIGS = re.compile(r"(Configs: ?)(\S*)")
_SPACES = re.compile(r"[ \t]+")


def normalize(text: str, *extra: tuple[str, str]) -> str:
    """What may differ between two correct brokers removed: ids, addresses, column widths;
    the order of a ``Configs:`` list sorted. ``extra``: more (regex, replacement) pairs."""
    text = _UUID.sub("<uuid>", text)
    text = _TOPIC_ID.sub(r"\1<id>", text)
    text = _ADDRESS.sub("<host>", text)
    text = _CONFIGS.sub(lambda m: m.group(1) + ",".join(sorted(m.group(2).split(","))), text)
    for pattern, replacement in extra:
        text = re.sub(pattern, replacement, text, flags=re.M)
    lines = [_SPACES.sub(" ", line).strip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line)


def differences(kafka_runs: list[Run], kip_runs: list[Run], *extra: tuple[str, str],
                unordered: Collection[int] = ()) -> list[str]:
    """Each command whose normalized output or exit code differs, both sides shown.
    ``unordered``: the indexes of commands whose lines may come in any order (a listing the
    broker takes from a hash map), compared sorted."""
    found = []
    for index, (a, b) in enumerate(zip(kafka_runs, kip_runs, strict=True)):
        left, right = normalize(a.text, *extra), normalize(b.text, *extra)
        if index in unordered:
            left, right = ("\n".join(sorted(text.splitlines())) for text in (left, right))
        if left != right or a.exit != b.exit:
            found.append(f"$ {' '.join(b.command)}\n--- Apache Kafka (exit {a.exit}):\n"
                         f"{left}\n--- kip broker (exit {b.exit}):\n{right}")
    return found
