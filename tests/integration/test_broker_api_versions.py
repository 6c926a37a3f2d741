"""ApiVersions advertises Kafka 3.9's table, and the versions new with it are served.

The table is kipproducer.broker.kafka_release.KAFKA_3_9, less the APIs listed there as not
served; the expected ranges below are spelled out once more, from the 3.9 message definitions,
so that an edit of that module cannot silently change what clients see.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient

from kipproducer import EmbeddedBroker
from kipproducer.broker.kafka_release import KAFKA_3_9, NOT_SERVED
from kipproducer.protocol import FEATURE_PRODUCE_CONDITIONAL, FEATURE_PRODUCE_OFFSETS
from kipproducer.protocol import error_codes as ec
from kipproducer.records import encode_batch

_KIP_TESTS = str(Path(__file__).resolve().parents[1] / "kip")
if _KIP_TESTS not in sys.path:
    sys.path.insert(0, _KIP_TESTS)

from raw_client import RawClient  # noqa: E402

PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 1, 2, 3, 10, 18
LIST_CLIENT_METRICS_RESOURCES = 74
INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 22, 24, 25, 26

#: What a Kafka 3.9 broker listener advertises for every API this broker serves.
SERVED_3_9 = {
    0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3),
    32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4), 36: (0, 2), 37: (0, 3), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 50: (0, 0),
    51: (0, 0),
    60: (0, 1), 61: (0, 0), 65: (0, 0), 66: (0, 1), 74: (0, 0),
    75: (0, 0),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    embedded = EmbeddedBroker(tmp_path_factory.mktemp("api-versions"))
    try:
        yield embedded
    finally:
        embedded.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def test_advertised_table_is_kafka_3_9(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    try:
        body = client.request(API_VERSIONS, 3, client_software_name="t",
                              client_software_version="1")
    finally:
        client.close()
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert advertised == SERVED_3_9
    # Every 3.9 key is either advertised with its 3.9 range or listed as not served.
    assert {k: v for k, v in KAFKA_3_9.items() if k not in NOT_SERVED} == advertised
    assert set(NOT_SERVED) <= set(KAFKA_3_9)
    # The KIP extensions stay announced.
    features = {f.name for f in body.supported_features}
    assert {FEATURE_PRODUCE_OFFSETS, FEATURE_PRODUCE_CONDITIONAL} <= features


def test_kafka_python_infers_3_9(broker: EmbeddedBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    try:
        assert admin.get_broker_version_data(broker.broker.node_id).broker_version == (3, 9)
        assert consumer.config["api_version"] == (3, 9)
    finally:
        consumer.close()
        admin.close()


def test_fetch_17_and_list_offsets_9(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    topic = unique("v17")
    try:
        client.create_topic(topic, 1)
        batch = encode_batch([(b"k", b"v", None, 0)])
        assert client.produce(topic, {0: batch}, mode=0, version=11)[0].error_code == 0
        meta = client.request(METADATA, 12, topics=[{"name": topic}],
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
        topic_id = meta.topics[0].topic_id
        body = client.request(FETCH, 17, max_wait=0, min_bytes=0,
                              max_bytes=1 << 20, isolation_level=0, session_id=0,
                              session_epoch=-1, topics=[{"topic_id": topic_id, "partitions": [{
                                  "partition": 0, "current_leader_epoch": -1,
                                  "fetch_offset": 0, "log_start_offset": -1,
                                  "partition_max_bytes": 1 << 20,
                                  "replica_directory_id": None}]}],
                              forgotten_topics_data=(), rack_id="")
        [part] = body.responses[0].partitions
        assert (part.error_code, part.high_watermark) == (0, 1) and part.records
        listed = client.request(LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[{
            "name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                           "timestamp": -1}]}])
        assert listed.topics[0].partitions[0].offset == 1
    finally:
        client.close()


def test_find_coordinator_6(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    try:
        body = client.request(FIND_COORDINATOR, 6, key_type=0, coordinator_keys=["g"])
        assert body.coordinators[0].node_id == broker.broker.node_id
        # The share group key type (KIP-932) is refused as Kafka 3.9 refuses it.
        body = client.request(FIND_COORDINATOR, 6, key_type=2, coordinator_keys=["g:t:0"])
        assert body.coordinators[0].error_code == ec.INVALID_REQUEST
    finally:
        client.close()


def test_add_partitions_to_txn_4_and_5_batched(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    topic, tid = unique("txn"), unique("tid")
    try:
        client.create_topic(topic, 2)
        init = client.request(INIT_PRODUCER_ID, 4, transactional_id=tid,
                              transaction_timeout=60000)
        pid, epoch = init.producer_id, init.producer_epoch

        def batched(version: int, verify_only: bool, partitions: list[int], *, who=pid,
                    name=topic) -> dict[int, int]:
            body = client.request(ADD_PARTITIONS, version, transactions=[{
                "transactional_id": tid, "producer_id": who, "producer_epoch": epoch,
                "verify_only": verify_only,
                "topics": [{"name": name, "partitions": partitions}]}])
            assert body.error_code == ec.NONE
            [txn] = body.results_by_transaction
            assert txn.transactional_id == tid
            return {p.partition_index: p.partition_error_code
                    for t in txn.topic_results for p in t.results_by_partition}

        assert batched(4, True, [0]) == {0: ec.INVALID_TXN_STATE}  # nothing added yet
        assert batched(5, False, [0]) == {0: ec.NONE}
        assert batched(4, True, [0, 1]) == {0: ec.NONE, 1: ec.INVALID_TXN_STATE}
        assert batched(5, True, [0], who=pid + 1000) == {0: ec.INVALID_PRODUCER_ID_MAPPING}
        assert batched(4, False, [5]) == {5: ec.UNKNOWN_TOPIC_OR_PARTITION}
        # AddOffsetsToTxn v4 is v3 with one more possible error.
        assert client.request(ADD_OFFSETS, 4, transactional_id=tid, producer_id=pid,
                              producer_epoch=epoch, group_id="g").error_code == ec.NONE
        assert client.request(END_TXN, 4, transactional_id=tid, producer_id=pid,
                              producer_epoch=epoch, committed=False).error_code == ec.NONE
    finally:
        client.close()


def test_describe_topic_partitions_pages_by_partition_count(broker: EmbeddedBroker) -> None:
    """kafka-python's DescribeTopicPartitions call: named topics in name order, a cursor once the
    partition limit is reached, unknown topics answered, none created."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    client = RawClient(broker.bootstrap_servers)
    a, b, missing = unique("dtp-a"), unique("dtp-b"), unique("dtp-none")
    try:
        client.create_topic(a, 3)
        client.create_topic(b, 2)
        first = admin.describe_topic_partitions([b, a, missing], response_partition_limit=4)
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in first["topics"]] == [(a, [0, 1, 2]), (b, [0])]
        assert first["next_cursor"] == {"topic_name": b, "partition_index": 1}
        assert {p["leader_id"] for t in first["topics"] for p in t["partitions"]} == {
            broker.broker.node_id}
        rest = admin.describe_topic_partitions([b, a, missing], cursor=first["next_cursor"])
        assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                for t in rest["topics"]] == [
            (b, 0, [1]), (missing, ec.UNKNOWN_TOPIC_OR_PARTITION, [])]
        assert rest["next_cursor"] is None
        assert missing not in broker.broker.logs.topics()
        # Without an authorizer every topic operation is allowed: Read, Write, Create, Delete,
        # Alter, Describe, DescribeConfigs, AlterConfigs (ACL codes 3-8, 10, 11).
        every = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))
        assert {t["topic_authorized_operations"] for t in rest["topics"]} == {every}
    finally:
        client.close()
        admin.close()


def test_list_client_metrics_resources_is_empty(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    try:
        body = client.request(LIST_CLIENT_METRICS_RESOURCES, 0)
        assert (body.error_code, body.config_resources) == (ec.NONE, ())
    finally:
        client.close()


def test_describe_client_quotas_is_empty(broker: EmbeddedBroker) -> None:
    """No client quotas are kept: any filter matches none (Kafka's kafka-configs asks for a
    user's quotas next to their SCRAM credentials: tests/apache_kafka's conformance module)."""
    client = RawClient(broker.bootstrap_servers)
    try:
        for version in (0, 1):
            body = client.request(48, version, strict=False, components=[
                {"entity_type": "user", "match_type": 0, "match": "alice"}])
            assert (body.error_code, body.error_message, body.entries) == (ec.NONE, None, ())
    finally:
        client.close()
