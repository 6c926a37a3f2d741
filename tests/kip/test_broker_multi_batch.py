"""KIP-WIRE version 2 (§9) on the wire: several batches of one partition in one Produce request.

Each rule of §9 is broken on purpose and must be refused with its error, with nothing of the
unit written; units that obey the rules land whole, and a stock consumer reads exactly the
offsets the batches carried.
"""

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from raw_client import RawClient
from test_broker_produce_modes import batch, stock_read, unique_topic, values

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import (
    FEATURE_PRODUCE_CONDITIONAL,
    FEATURE_PRODUCE_OFFSETS,
    ProduceMode,
)
from kipproducer.records import encode_batch

USE, EXPECT, ASSIGN = ProduceMode.USE_OFFSETS, ProduceMode.EXPECTED_OFFSETS, ProduceMode.ASSIGN


def unit(*batches: bytes) -> bytes:
    return b"".join(batches)


def idempotent_batch(vals, base_offset, producer_id, sequence, epoch=0, **kw):
    now = int(time.time() * 1000)
    return encode_batch([(b"k-" + v, v, [], now) for v in vals], base_offset=base_offset,
                        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                        **kw)


def producer_id(client) -> int:
    answer = client.request(22, 4, transactional_id=None, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)
    assert answer.error_code == 0
    return answer.producer_id


def log_end(bootstrap, topic, partition=0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm-" + topic})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def test_features_advertise_version_2(client):
    v3 = client.request(18, 3, client_software_name="t", client_software_version="1")
    names = {f.name: (f.min_version, f.max_version) for f in v3.supported_features}
    assert names[FEATURE_PRODUCE_OFFSETS] == (1, 2)
    assert names[FEATURE_PRODUCE_CONDITIONAL] == (1, 2)


def test_use_offsets_unit_with_gaps_lands_whole(broker, client):
    topic = unique_topic(client)
    answer = client.produce(topic, {0: unit(batch(values(b"a", 3), 10), batch([b"b"], 20),
                                            batch(values(b"c", 2), 21))}, mode=USE)[0]
    assert (answer.error_code, answer.base_offset, answer.log_end_offset) == (0, 10, 23)
    expected = [(10 + i, b"a-%d" % i) for i in range(3)] + [(20, b"b")] + [
        (21 + i, b"c-%d" % i) for i in range(2)]
    assert stock_read(broker.bootstrap_servers, topic, start=0, expect=6) == expected
    assert log_end(broker.bootstrap_servers, topic) == 23


def test_expected_offsets_unit_appends_consecutively(broker, client):
    topic = unique_topic(client)
    answer = client.produce(topic, {0: unit(batch(values(b"x", 2), 0), batch([b"y"], 2),
                                            batch([b"z"], -1))}, mode=EXPECT)[0]
    assert (answer.error_code, answer.base_offset, answer.log_end_offset) == (0, 0, 4)
    # No first expectation: the unit goes at the log end, later batches expect nothing.
    answer = client.produce(topic, {0: unit(batch([b"p"], -1), batch([b"q"], -1))},
                            mode=EXPECT)[0]
    assert (answer.error_code, answer.base_offset, answer.log_end_offset) == (0, 4, 6)
    # A first expectation that does not match: nothing of the unit is written.
    answer = client.produce(topic, {0: unit(batch([b"late"], 3), batch([b"late2"], 4))},
                            mode=EXPECT)[0]
    assert (answer.error_code, answer.log_end_offset) == (ec.OFFSET_MISMATCH, 6)
    assert [v for _, v in stock_read(broker.bootstrap_servers, topic, expect=6)] == [
        b"x-0", b"x-1", b"y", b"z", b"p", b"q"]


@pytest.mark.parametrize(("mode", "batches", "code", "text"), [
    (USE, lambda pid: [batch([b"a", b"b"], 5), batch([b"c"], 6)], ec.INVALID_RECORD,
     "overlaps or goes back"),
    (USE, lambda pid: [batch([b"a"], 5), batch([b"c"], 2)], ec.INVALID_RECORD,
     "overlaps or goes back"),
    (EXPECT, lambda pid: [batch([b"a"], 0), batch([b"c"], 5)], ec.INVALID_RECORD,
     "expects -1 or exactly 1"),
    (EXPECT, lambda pid: [batch([b"a"], -1), batch([b"c"], 1)], ec.INVALID_RECORD,
     "after a batch with no expectation"),
    (USE, lambda pid: [idempotent_batch([b"a"], 0, pid, 0),
                       idempotent_batch([b"b"], 1, pid, 5)], ec.INVALID_RECORD,
     "does not continue the previous batch"),
    (USE, lambda pid: [idempotent_batch([b"a"], 0, pid, 0),
                       idempotent_batch([b"b"], 1, pid + 1, 1)], ec.INVALID_RECORD,
     "differs from the first batch"),
    (USE, lambda pid: [batch([b"a"], 0), bytearray(batch([b"b"], 1))], None, None),
    # Kafka's rule without a ProduceMode.
    (ASSIGN, lambda pid: [batch([b"a"], 0), batch([b"b"], 0)], ec.INVALID_RECORD,
     "exactly one batch"),
])
def test_unit_rules_refused_with_nothing_written(broker, client, mode, batches, code, text):
    topic = unique_topic(client)
    parts = batches(producer_id(client))
    if code is None:  # a corrupt second batch: its CRC no longer matches
        parts[1][-1] ^= 0xFF
        parts[1] = bytes(parts[1])
        code, text = ec.CORRUPT_MESSAGE, "CRC"
    answer = client.produce(topic, {0: unit(*parts)}, mode=mode)[0]
    assert answer.error_code == code
    assert text in answer.error_message
    assert log_end(broker.bootstrap_servers, topic) == 0
    # The partition still takes a good unit afterwards.
    good = client.produce(topic, {0: unit(batch([b"ok"], 0), batch([b"ok2"], 7))},
                          mode=USE)[0]
    assert (good.error_code, good.log_end_offset) == (0, 8)


def test_duplicate_unit_answered_with_its_first_offsets(broker, client):
    """A retried unit (same producer, epoch and sequence range) is recognised as one entry of
    the idempotence window: its original base offset comes back and nothing is appended."""
    topic = unique_topic(client)
    pid = producer_id(client)
    records = unit(idempotent_batch([b"a", b"b"], 100, pid, 0),
                   idempotent_batch([b"c"], 200, pid, 2),
                   idempotent_batch([b"d"], 300, pid, 3))
    first = client.produce(topic, {0: records}, mode=USE)[0]
    assert (first.error_code, first.base_offset, first.log_end_offset) == (0, 100, 301)
    again = client.produce(topic, {0: records}, mode=USE)[0]
    assert (again.error_code, again.base_offset, again.log_end_offset) == (0, 100, 301)
    # The next unit continues the sequence after the whole unit.
    after = client.produce(topic, {0: unit(idempotent_batch([b"e"], 400, pid, 4),
                                           idempotent_batch([b"f"], 402, pid, 5))},
                           mode=USE)[0]
    assert (after.error_code, after.base_offset, after.log_end_offset) == (0, 400, 403)
    assert [(o, v) for o, v in stock_read(broker.bootstrap_servers, topic, expect=6)] == [
        (100, b"a"), (101, b"b"), (200, b"c"), (300, b"d"), (400, b"e"), (402, b"f")]


def test_version_1_broker_takes_one_batch_per_partition():
    with EmbeddedBroker(config={"kip.wire.version": 1}) as old:
        client = RawClient(old.bootstrap_servers)
        try:
            v3 = client.request(18, 3, client_software_name="t", client_software_version="1")
            names = {f.name: (f.min_version, f.max_version) for f in v3.supported_features}
            assert names[FEATURE_PRODUCE_OFFSETS] == (1, 1)
            topic = unique_topic(client)
            answer = client.produce(topic, {0: unit(batch([b"a"], 0), batch([b"b"], 5))},
                                    mode=USE)[0]
            assert answer.error_code == ec.INVALID_RECORD
            assert "kip.wire.version=1" in answer.error_message
            single = client.produce(topic, {0: batch([b"a"], 0)}, mode=USE)[0]
            assert (single.error_code, single.log_end_offset) == (0, 1)
        finally:
            client.close()


def test_unit_transactional_flags_must_agree():
    """The flag rule, on the splitter itself: reaching it on the wire needs an open transaction
    whose verification runs first for each transactional batch."""
    from kipproducer.broker.produce_unit import BatchUnit
    from kipproducer.records import UnitRuleError, split_unit

    records = memoryview(bytearray(unit(idempotent_batch([b"a"], 0, 9, 0),
                                        idempotent_batch([b"b"], 1, 9, 1, transactional=True))))
    with pytest.raises(UnitRuleError, match="transactional flag differs"):
        split_unit(records, EXPECT)
    whole = memoryview(bytearray(unit(idempotent_batch([b"a", b"b"], 0, 9, 0),
                                      idempotent_batch([b"c"], 2, 9, 2))))
    good = BatchUnit(split_unit(whole, EXPECT), whole)
    assert (good.base_sequence, good.last_offset_delta, good.record_count, len(good)) == (
        0, 2, 3, 2)
    assert [bytes(buf) for buf, _ in good.parts] == [
        bytes(whole[b.position:b.position + b.size_in_bytes]) for b in good.batches]


def test_unit_inflates_under_the_decompression_bound():
    """A compressed batch inside a unit inflates no further than decompressed.batch.max.bytes,
    as a single batch does: MESSAGE_TOO_LARGE, nothing of the unit written."""
    with EmbeddedBroker(config={"decompressed.batch.max.bytes": 4096}) as small:
        client = RawClient(small.bootstrap_servers)
        try:
            topic = unique_topic(client)
            big = batch([b"x" * 100 + b"-%d" % i for i in range(100)], 5, compression="gzip")
            answer = client.produce(topic, {0: unit(batch([b"a"], 0), big)}, mode=USE)[0]
            assert answer.error_code == ec.MESSAGE_TOO_LARGE
            assert "decompressed.batch.max.bytes" in answer.error_message
            assert answer.log_end_offset == 0
            fits = batch([b"y-%d" % i for i in range(5)], 1, compression="gzip")
            answer = client.produce(topic, {0: unit(batch([b"a"], 0), fits)}, mode=USE)[0]
            assert (answer.error_code, answer.log_end_offset) == (0, 6)
        finally:
            client.close()
