"""A Spark driver process for the batch kill -9 tests: ``df.write.format("kip")`` of ROWS rows
(key k<i>, value v<i>, 8 Spark partitions) as the named write WRITE_ID.

    python batch_driver.py TARGET TOPIC WRITE_ID ROWS MARKER run|stop-before|stop-between

``run``: the write, then exit. ``stop-before`` / ``stop-between``: the driver's commit stops
for good (to be killed -9) before it records anything, or after the first of the tasks'
transactions is committed, and touches MARKER when it got there. The commit is the real one:
only the moment is chosen, by wrapping the sink's own functions.

A Python data source's ``commit`` does not run in this process but in a Python worker the JVM
starts, so the wrapping is installed in every Python process of the job by a
``sitecustomize`` (written next to MARKER) that calls ``install()``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

STOP, MARKER = "KIP_TEST_BATCH_STOP", "KIP_TEST_BATCH_MARKER"


def _stop_here() -> None:
    Path(os.environ[MARKER]).touch()
    parent = os.getppid()
    while os.getppid() == parent:  # until the Spark processes above this one are gone
        time.sleep(0.2)
    os._exit(1)


def install() -> None:
    """In a worker: make the sink's commit stop where ``$KIP_TEST_BATCH_STOP`` says."""
    mode = os.environ.get(STOP)
    if mode == "stop-before":
        from kipproducer.spark import ledger

        ledger.Ledger.commit = lambda self, batch_id, new: _stop_here()  # type: ignore
    elif mode == "stop-between":
        from kipproducer.spark import twophase

        twophase.THREADS = 1  # one EndTxn at a time: exactly one is committed
        real_end = twophase.end

        def end_then_stop(props, txn, commit, timeout_ms):  # type: ignore[no-untyped-def]
            real_end(props, txn, commit, timeout_ms)
            if commit:
                _stop_here()

        twophase.end = end_then_stop


def main() -> None:
    target, topic, write_id, rows, marker, mode = sys.argv[1:7]
    if mode != "run":
        hooks = Path(marker).with_suffix(".hooks")
        hooks.mkdir(exist_ok=True)
        (hooks / "sitecustomize.py").write_text("import batch_driver\nbatch_driver.install()\n")
        os.environ.update({STOP: mode, MARKER: marker, "PYTHONPATH": os.pathsep.join(
            p for p in (str(hooks), str(Path(__file__).parent),
                        os.environ.get("PYTHONPATH", "")) if p)})
    from kipproducer import spark as kip_spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = kip_spark.session("local[2,4]", "kip-batch-driver", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false"})
    df = spark.range(0, int(rows), numPartitions=8).selectExpr(
        "cast(concat('k', id) as binary) as key", "cast(concat('v', id) as binary) as value")
    (df.write.format("kip").option("kafka.bootstrap.servers", target).option("topic", topic)
     .option("kip.write.id", write_id).mode("append").save())
    spark.stop()


if __name__ == "__main__":
    main()
