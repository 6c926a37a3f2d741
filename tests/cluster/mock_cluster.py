"""A multi-broker cluster for tests: librdkafka's mock cluster, driven with ctypes.

The librdkafka in the confluent-kafka wheel exports the ``rd_kafka_mock_*`` functions. The
cluster runs in its own subprocess (this file run as a script), which owns a librdkafka
handle with ``test.mock.num.brokers`` set and its mock cluster; the test drives it with one
JSON command per line on the subprocess's stdin and reads one JSON answer per line. A crash
or a leak of the mock cannot take the test run down, and :meth:`MockCluster.close` stops the
subprocess by its PID.

What the mock models, and what it does not (assert only the former):

* Brokers 1..N on loopback ports; leaders are whatever :meth:`set_leader` says.
  :meth:`broker_down` closes the broker's connections and refuses new ones, but moves no
  leader: a failover is ``broker_down`` then ``set_leader`` for its partitions.
* Idempotent sequences are checked only for transactional producers; a plain idempotent
  producer's retried batch is appended again (such duplicates are the mock's).
* Fetch reports the high watermark as the last stable offset and no aborted transactions:
  read_committed reads cannot be checked. One batch per partition per Fetch; a partition's
  log is capped at a few MiB.
* No DescribeConfigs, ListGroups, controller, or the kipproducer wire extensions (KIP-WIRE):
  it is a stock broker to kipproducer.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

PRODUCE, FETCH, METADATA = 0, 1, 3


def _librdkafka_path() -> str:
    import confluent_kafka

    base = Path(confluent_kafka.__file__).resolve().parent.parent
    found = sorted(glob.glob(str(base / "confluent_kafka.libs" / "librdkafka*.so*")))
    if not found:
        raise RuntimeError(f"no librdkafka under {base / 'confluent_kafka.libs'}")
    return found[0]


# ---- the subprocess ---------------------------------------------------------------------------

class _Mock:
    """The subprocess's side: one librdkafka handle and its mock cluster."""

    def __init__(self, brokers: int) -> None:
        lib = self.lib = ctypes.CDLL(_librdkafka_path())
        p, s, i32, i16, sz = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                              ctypes.c_int16, ctypes.c_size_t)
        signatures = {
            "rd_kafka_conf_new": (p, []),
            "rd_kafka_conf_set": (ctypes.c_int, [p, s, s, s, sz]),
            "rd_kafka_new": (p, [ctypes.c_int, p, s, sz]),
            "rd_kafka_destroy": (None, [p]),
            "rd_kafka_handle_mock_cluster": (p, [p]),
            "rd_kafka_mock_cluster_bootstraps": (s, [p]),
            "rd_kafka_mock_topic_create": (ctypes.c_int, [p, s, ctypes.c_int, ctypes.c_int]),
            "rd_kafka_mock_partition_set_leader": (ctypes.c_int, [p, s, i32, i32]),
            "rd_kafka_mock_broker_set_down": (ctypes.c_int, [p, i32]),
            "rd_kafka_mock_broker_set_up": (ctypes.c_int, [p, i32]),
            "rd_kafka_mock_broker_set_rtt": (ctypes.c_int, [p, i32, ctypes.c_int]),
            "rd_kafka_mock_push_request_errors_array": (
                None, [p, i16, sz, ctypes.POINTER(ctypes.c_int)]),
            "rd_kafka_mock_clear_request_errors": (None, [p, i16]),
            "rd_kafka_mock_coordinator_set": (ctypes.c_int, [p, s, s, i32]),
            "rd_kafka_mock_set_controller_id": (None, [p, i32]),
        }
        for name, (restype, argtypes) in signatures.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        # variadic: (err, rtt_ms) pairs; integers only, so the plain C calling convention
        lib.rd_kafka_mock_broker_push_request_error_rtts.restype = ctypes.c_int
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        for key, value in (("test.mock.num.brokers", str(brokers)), ("log_level", "0")):
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, 512) != 0:
                raise RuntimeError(f"{key}: {errstr.value.decode()}")
        self.rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER
        if not self.rk:
            raise RuntimeError(errstr.value.decode())
        self.mc = lib.rd_kafka_handle_mock_cluster(self.rk)
        if not self.mc:
            raise RuntimeError("the handle has no mock cluster")

    def run(self, cmd: str, args: dict[str, Any]) -> Any:
        lib, mc = self.lib, self.mc
        if cmd == "bootstraps":
            return lib.rd_kafka_mock_cluster_bootstraps(mc).decode()
        if cmd == "create_topic":
            return lib.rd_kafka_mock_topic_create(mc, args["topic"].encode(),
                                                  args["partitions"], args["replication"])
        if cmd == "set_leader":
            return lib.rd_kafka_mock_partition_set_leader(mc, args["topic"].encode(),
                                                          args["partition"], args["broker"])
        if cmd == "down":
            return lib.rd_kafka_mock_broker_set_down(mc, args["broker"])
        if cmd == "up":
            return lib.rd_kafka_mock_broker_set_up(mc, args["broker"])
        if cmd == "rtt":
            return lib.rd_kafka_mock_broker_set_rtt(mc, args["broker"], args["ms"])
        if cmd == "push_errors":
            errors = args["errors"]
            array = (ctypes.c_int * len(errors))(*errors)
            lib.rd_kafka_mock_push_request_errors_array(mc, args["api_key"], len(errors),
                                                        array)
            return 0
        if cmd == "clear_errors":
            lib.rd_kafka_mock_clear_request_errors(mc, args["api_key"])
            return 0
        if cmd == "push_broker_errors":
            flat: list[Any] = []
            for code, rtt_ms in args["errors"]:
                flat += [ctypes.c_int(code), ctypes.c_int(rtt_ms)]
            return lib.rd_kafka_mock_broker_push_request_error_rtts(
                ctypes.c_void_p(mc), ctypes.c_int32(args["broker"]),
                ctypes.c_int16(args["api_key"]), ctypes.c_size_t(len(args["errors"])), *flat)
        if cmd == "coordinator":
            return lib.rd_kafka_mock_coordinator_set(mc, args["key_type"].encode(),
                                                     args["key"].encode(), args["broker"])
        if cmd == "controller":
            lib.rd_kafka_mock_set_controller_id(mc, args["broker"])
            return 0
        raise ValueError(f"unknown command {cmd!r}")


def _serve(brokers: int) -> None:
    mock = _Mock(brokers)
    out = sys.stdout
    out.write(json.dumps({"ok": mock.run("bootstraps", {})}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": mock.run(request["cmd"], request.get("args", {}))}
        except Exception as exc:  # the test sees it as an exception of its own
            answer = {"error": repr(exc)}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    # stdin closed: the test is done with us
    mock.lib.rd_kafka_destroy(mock.rk)


# ---- the test's side --------------------------------------------------------------------------

class MockClusterError(RuntimeError):
    """A command failed in the mock cluster's subprocess (or it is gone)."""


class MockCluster:
    """A librdkafka mock cluster of ``brokers`` brokers (ids 1..N) in a subprocess."""

    def __init__(self, brokers: int = 3, log_path: Path | None = None) -> None:
        self.broker_ids = list(range(1, brokers + 1))
        self._log = open(log_path, "wb") if log_path is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(brokers)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        self.bootstrap = self._answer("the mock cluster's bootstrap servers")

    def _answer(self, what: str) -> Any:
        line = self.proc.stdout.readline()
        if not line:
            raise MockClusterError(f"the mock cluster subprocess ended (rc "
                                   f"{self.proc.poll()}) before answering {what}")
        answer = json.loads(line)
        if "error" in answer:
            raise MockClusterError(f"{what}: {answer['error']}")
        return answer["ok"]

    def command(self, cmd: str, **args: Any) -> Any:
        self.proc.stdin.write(json.dumps({"cmd": cmd, "args": args}) + "\n")
        self.proc.stdin.flush()
        return self._answer(cmd)

    def _checked(self, cmd: str, **args: Any) -> None:
        err = self.command(cmd, **args)
        if err:
            raise MockClusterError(f"{cmd} {args}: librdkafka error {err}")

    # commands
    def create_topic(self, topic: str, partitions: int,
                     leaders: list[int] | None = None) -> None:
        """A topic of ``partitions`` partitions, replicated on every broker; ``leaders[i]``
        leads partition i (default: brokers 1..N in turn)."""
        self._checked("create_topic", topic=topic, partitions=partitions,
                      replication=len(self.broker_ids))
        for partition in range(partitions):
            leader = (leaders[partition] if leaders is not None
                      else self.broker_ids[partition % len(self.broker_ids)])
            self.set_leader(topic, partition, leader)

    def set_leader(self, topic: str, partition: int, broker: int) -> None:
        self._checked("set_leader", topic=topic, partition=partition, broker=broker)

    def broker_down(self, broker: int) -> None:
        self._checked("down", broker=broker)

    def broker_up(self, broker: int) -> None:
        self._checked("up", broker=broker)

    def set_rtt(self, broker: int, ms: int) -> None:
        self._checked("rtt", broker=broker, ms=ms)

    def push_request_errors(self, api_key: int, errors: list[int]) -> None:
        """The next ``len(errors)`` requests of ``api_key`` to any broker fail with these."""
        self.command("push_errors", api_key=api_key, errors=list(errors))

    def clear_request_errors(self, api_key: int) -> None:
        self.command("clear_errors", api_key=api_key)

    def push_broker_errors(self, broker: int, api_key: int,
                           errors: list[tuple[int, int]]) -> None:
        """The next requests of ``api_key`` to ``broker``: (error code, delay ms) each."""
        self._checked("push_broker_errors", broker=broker, api_key=api_key,
                      errors=[list(e) for e in errors])

    def set_coordinator(self, key_type: str, key: str, broker: int) -> None:
        """``key_type`` "transaction" or "group"."""
        self._checked("coordinator", key_type=key_type, key=key, broker=broker)

    def set_controller(self, broker: int) -> None:
        """The broker Metadata names as the controller. The mock names none by default, and
        librdkafka's admin client then waits its whole timeout for one before it finds that
        CreateTopics is not served (the mock has no topic admin API)."""
        self.command("controller", broker=broker)

    def close(self) -> int | None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        return self.proc.returncode

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
