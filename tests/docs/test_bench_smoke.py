"""Each benchmark script (bench/side_by_side_*.py, whose commands the docs give and
test_bench_commands.py checks flag by flag) runs end to end at a small size: it starts its
brokers, runs every contender, checks what they delivered, prints its table and exits 0.

Only the sizes differ from the documented commands (a few thousand records, one round), so a
script that breaks (a renamed API, a missing package, a contender that loses records) fails
here rather than in the next session's benchmark run. The Spark benchmark runs once, on
Apache Kafka with Spark's own Kafka connector beside format("kip") (its issue 43 lanes, whose
jars come from Maven): one Spark session costs more than all of the others together, and the
Spark tests start the same source and sink on `kip broker`, so its older tables are left to
test_bench_commands.py.

The Apache Kafka runs (issue 43: ``--broker kafka1``, the Java producer, MirrorMaker 2 and
spark-sql-kafka as lanes, the offset copy and the stock bench's lanes emulated there) need
Java and Kafka's jars, as tests/apache_kafka does (and the Spark one pyspark and the
connector's jars): without them they skip with one line naming what is missing, except under
``CI=true``, where that fails. The per-key conditional bench (issue
44) also needs the nats-server binary (Debian package ``nats-server``), and skips with one
line without it (fails under ``CI=true``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

# (script, small arguments, a line its report must contain)
RUNS = [
    ("side_by_side_core.py", ["--records", "2000", "--repeat", "1"], "vs aiokafka"),
    ("side_by_side_producer.py", ["--records", "2000", "--repeat", "1", "--callbacks", "both"],
     "kip produce_batch / confluent produce_batch"),
    ("side_by_side_copy.py", ["--records", "2000", "--repeat", "1", "--gap-rate", "0.5:1",
                              "--callbacks", "off"], "kip produce_arrays(offsets=)"),
    ("side_by_side_mirror.py", ["--records", "2000", "--repeat", "1"], "kip mirror"),
    ("side_by_side_tls.py", ["--records", "2000", "--repeat", "1"],
     "TLS, CPU s per 1M records, kip produce_arrays"),
    ("side_by_side_stock.py", ["--records", "2000", "--gap-rate", "0,0.01",
                               "--conditional-records", "200"], "emulated produce_arrays"),
    ("side_by_side_broker.py", ["--messages", "2000", "--repeat", "1", "--partitions", "1"],
     "tansu"),
    ("side_by_side_gaps.py", ["--records", "1000", "--run", "100", "--repeat", "1",
                              "--brokers", "standin", "--protocols", "auto,classic"], "ms/gap"),
    ("side_by_side_mirror_lag.py", ["--broker", "kip", "--rate", "500", "--seconds", "2",
                                    "--repeat", "1"], "| kip mirror preserve |"),
]


# The same on Apache Kafka (one node): each starts its own cluster, ~10 s of JVM start.
KAFKA_RUNS = [
    ("side_by_side_producer.py", ["--records", "2000", "--repeat", "1", "--broker", "kafka1",
                                  "--contenders", "kip produce_arrays,java producer",
                                  "--callbacks", "both"],
     "kip produce_arrays / java producer, without callbacks"),
    # two 1-node clusters, MirrorMaker 2's JVM once: the dense shape only (the compacted one
    # waits for Kafka's cleaner and starts MirrorMaker 2 again: a minute more of CI)
    ("side_by_side_mirror.py", ["--records", "3000", "--repeat", "1", "--broker", "kafka1",
                                "--shapes", "dense"],
     "kip mirror transactional / MirrorMaker 2"),
    # the offset copy emulated (kip.mode auto; the script fails unless kip_mode() says so),
    # its check reading the holes' aborted fillers past with read_committed
    ("side_by_side_copy.py", ["--records", "2000", "--repeat", "1", "--gap-rate", "0.01",
                              "--broker", "kafka1"],
     "| kip produce_arrays(offsets=) | kept, gaps 0.01 (KIP-391, emulated) |"),
    # the stand-in's emulated lanes on real Kafka; the native conditional ones on kip broker
    ("side_by_side_stock.py", ["--records", "2000", "--gap-rate", "0,0.01",
                               "--conditional-records", "200", "--broker", "kafka1"],
     "| 10,000 | emulated |"),
]


# Spark on Apache Kafka (one node), format("kip") beside spark-sql-kafka: one session.
SPARK_KAFKA_RUN = ("side_by_side_spark.py", ["--records", "3000", "--repeat", "1", "--broker",
                                             "kafka1", "--masters", "local[2]"],
                   "kip sink (transactional) / spark-sql-kafka sink, rows/s per round")


def require_apache_kafka() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "apache_kafka"))
    import kafka_jars

    kafka_jars.require_in_tests()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("script", "args", "expect"), RUNS, ids=[r[0] for r in RUNS])
def test_benchmark_script_runs_end_to_end(script: str, args: list[str], expect: str,
                                          tmp_path: Path) -> None:
    run_bench(script, args, expect, tmp_path)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("script", "args", "expect"), KAFKA_RUNS,
                         ids=[r[0] for r in KAFKA_RUNS])
def test_benchmark_script_runs_on_apache_kafka(script: str, args: list[str], expect: str,
                                               tmp_path: Path) -> None:
    require_apache_kafka()
    run_bench(script, args, expect, tmp_path)


@pytest.mark.timeout(300)
def test_key_conditional_bench_runs_against_jetstream(tmp_path: Path) -> None:
    """Every system and lane, the several-writers and one-at-a-time tables and the conflict
    run, whose judge (nothing lost or duplicated, exactly the expected refusals) fails the
    script."""
    if shutil.which("nats-server") is None:
        # .ci/run installs it: in CI a missing peer fails rather than skips
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "no nats-server on PATH (Debian package nats-server)")
    require_apache_kafka()
    report = run_bench("side_by_side_key_conditional.py",
                       ["--keys", "50", "--records", "200", "--repeat", "1", "--serial-records",
                        "20", "--writers", "2", "--conflict-keys", "3", "--conflict-attempts",
                        "20"],
                       "| kip emulated, Apache Kafka 1 node | kip produce_arrays |", tmp_path)
    # the several-writers table: a false conflict between writers fails the script
    assert "2 writers at once" in report, report[-2000:]


@pytest.mark.timeout(480)
@pytest.mark.xdist_group("spark")  # never two Spark drivers at work at once (tests/conftest.py)
def test_spark_benchmark_runs_on_apache_kafka_beside_spark_sql_kafka(tmp_path: Path) -> None:
    require_apache_kafka()
    import spark_kafka_jars

    spark_kafka_jars.require_in_tests()
    spark_kafka_jars.fetch()  # Maven, the first time on a machine: not in the run's time limit
    script, args, expect = SPARK_KAFKA_RUN
    report = run_bench(script, args, expect, tmp_path, timeout_s=420)
    assert "kip source / spark-sql-kafka source, rows/s per round" in report, report[-2000:]


def run_bench(script: str, args: list[str], expect: str, tmp_path: Path,
              timeout_s: float = 280) -> str:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=BENCH, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, f"{script} {' '.join(args)}:\n{proc.stderr[-3000:]}"
    report = proc.stdout + proc.stderr
    assert expect.lower() in report.lower(), f"{script}: no {expect!r} in:\n{report[-2000:]}"
    return report
