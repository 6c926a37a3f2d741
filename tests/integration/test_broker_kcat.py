"""kcat (the Debian package) against the broker subprocess: produce lines, consume them back.

kcat is a system tool, not a Python package: .ci/run installs it (Debian package kcat). Where
it is missing these tests are skipped with the install command, so the README's test command
passes on a fresh machine; under CI (CI=true) a missing kcat fails instead, so the interop
check can never silently disappear from CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from integration_support import KipBroker, consume_records, create_topics, unique

TIMEOUT = 30.0


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        why = ("kcat is not installed; install it with `apt-get install -y kcat` "
               "(Debian/Ubuntu package kcat; .ci/run installs it)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory()


def run(args: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def produce(kcat: str, broker: KipBroker, topic: str, pairs, *extra: str) -> None:
    lines = "".join(f"{k}:{v}\n" for k, v in pairs)
    run([kcat, "-P", "-b", broker.bootstrap, "-t", topic, "-K:", *extra], lines)


def consume(kcat: str, broker: KipBroker, topic: str, fmt: str) -> list[str]:
    """Everything from the beginning to the end (-e), one formatted line per record."""
    args = ["-C", "-b", broker.bootstrap, "-t", topic, "-e", "-o", "beginning", "-q", "-f", fmt]
    return run([kcat, *args]).splitlines()


def lines_for(n: int) -> list[tuple[str, str]]:
    # Values with spaces, '=' and non-ASCII: kcat passes the bytes through untouched.
    return [(f"key-{i % 7}", f"value {i} = ünïcode {'x' * (i % 13)}") for i in range(n)]


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "lz4", "zstd"])
def test_kcat_produce_then_consume(kcat: str, broker: KipBroker, codec: str) -> None:
    topic = unique(f"kcat-{codec}")
    create_topics(broker.bootstrap, {topic: 1})
    pairs = lines_for(300)
    produce(kcat, broker, topic, pairs, "-z", codec, "-X", "enable.idempotence=true")
    assert consume(kcat, broker, topic, "%k=%s\n") == [f"{k}={v}" for k, v in pairs]

    # The same records as librdkafka's consumer reads them (CRCs checked), with offsets.
    got = consume_records(broker.bootstrap, topic, len(pairs), timeout=TIMEOUT)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, k.encode(), v.encode()) for i, (k, v) in enumerate(pairs)
    ]


def test_kcat_metadata_and_multi_partition_topic(kcat: str, broker: KipBroker) -> None:
    topic = unique("kcat-parts")
    create_topics(broker.bootstrap, {topic: 3})
    listing = run([kcat, "-L", "-b", broker.bootstrap, "-t", topic])
    assert f'topic "{topic}" with 3 partitions' in listing
    assert "broker 1 at" in listing

    pairs = lines_for(200)
    produce(kcat, broker, topic, pairs)
    seen = [line.split(" ", 2) for line in consume(kcat, broker, topic, "%p %o %k=%s\n")]
    assert sorted(text for _, _, text in seen) == sorted(f"{k}={v}" for k, v in pairs)
    # Keys are partitioned consistently, and each key's records keep their order.
    partition_of: dict[str, str] = {}
    for p, _, text in seen:
        key = text.split("=", 1)[0]
        assert partition_of.setdefault(key, p) == p
    for key in {k for k, _ in pairs}:
        assert [t for _, _, t in seen if t.startswith(key + "=")] == [
            f"{k}={v}" for k, v in pairs if k == key
        ]
    # Offsets per partition: 0..n-1 in order.
    for p in {p for p, _, _ in seen}:
        offsets = [int(o) for q, o, _ in seen if q == p]
        assert offsets == list(range(len(offsets)))


def test_kcat_auto_creates_a_topic_on_produce(kcat: str, broker: KipBroker) -> None:
    topic = unique("kcat-auto")  # not created: auto.create.topics.enable defaults to true
    produce(kcat, broker, topic, [("a", "1"), ("b", "2")])
    assert consume(kcat, broker, topic, "%k=%s\n") == ["a=1", "b=2"]
