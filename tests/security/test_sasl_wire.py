"""SASL on the wire: Kafka's handshake flow, and every way a client can get it wrong.

Each bad exchange must end with a clear answer (or a closed connection and a log line) while
the broker goes on serving everybody else.
"""

from __future__ import annotations

import logging

import pytest
from security_support import ALL_MECHANISMS, connect

from kipproducer.protocol import build_request, encode_request_frame
from kipproducer.protocol import error_codes as ec
from kipproducer.sasl.scram import ScramClient

PLAIN_TOKEN = b"\0alice\0alice-pw"
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34


@pytest.fixture(scope="module")
def broker():
    from kipproducer.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(config={"sasl.enabled.mechanisms": ALL_MECHANISMS}) as b:
        b.broker.users.add("alice", "alice-pw")
        yield b


@pytest.fixture
def client(broker):
    c = connect(broker.bootstrap_servers)
    yield c
    c.close()


def still_serving(broker) -> None:
    """A fresh client can still authenticate and get metadata."""
    other = connect(broker.bootstrap_servers)
    try:
        other.login("SCRAM-SHA-256", "alice", "alice-pw")
        assert other.request(3, 12, topics=None).brokers[0].node_id == broker.broker.node_id
    finally:
        other.close()


def test_api_versions_advertises_the_sasl_and_acl_apis(client):
    body = client.request(18, 3, client_software_name="t", client_software_version="1")
    versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert versions[17] == (0, 1) and versions[36] == (0, 2)
    # Kafka 3.9's ranges; v0 (removed in 4.0) is advertised but refused if sent.
    assert versions[29] == versions[30] == versions[31] == (0, 3)
    assert versions[50] == versions[51] == (0, 0)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_each_mechanism_then_requests_are_served(broker, client, mechanism):
    client.request(18, 3, client_software_name="t", client_software_version="1")
    shake = client.handshake(mechanism)
    assert shake.error_code == 0
    assert list(shake.mechanisms) == ALL_MECHANISMS.split(",")
    if mechanism == "PLAIN":
        answer = client.authenticate(PLAIN_TOKEN)
        assert (answer.error_code, answer.auth_bytes, answer.session_lifetime) == (0, b"", 0)
    else:
        scram = ScramClient(mechanism, "alice", "alice-pw")
        first = client.authenticate(scram.first())
        final = client.authenticate(scram.final(first.auth_bytes))
        assert final.error_code == 0
        scram.verify(final.auth_bytes)
    assert client.request(3, 12, topics=None).cluster_id == broker.broker.config.cluster_id


def test_sasl_authenticate_v0_and_v1_answers(client):
    assert client.handshake("PLAIN").error_code == 0
    answer = client.authenticate(PLAIN_TOKEN, version=0)
    assert (answer.error_code, answer.error_message) == (0, None)


def test_unknown_mechanism_lists_the_enabled_ones_then_closes(broker, client):
    shake = client.handshake("GSSAPI")
    assert shake.error_code == UNSUPPORTED_SASL_MECHANISM
    assert list(shake.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert client.is_closed()
    still_serving(broker)


def test_mechanism_names_are_case_sensitive_as_in_kafka(client):
    assert client.handshake("plain").error_code == UNSUPPORTED_SASL_MECHANISM


@pytest.mark.parametrize("api_key, version, fields", [
    (3, 12, {"topics": None}),  # Metadata
    (0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": []}),
    (19, 5, {"topics": [], "timeout": 1000}),  # CreateTopics
])
def test_requests_before_authentication_close_the_connection(broker, client, caplog,
                                                              api_key, version, fields):
    caplog.set_level(logging.WARNING, logger="kipproducer.broker")
    client.correlation += 1
    client.sock.sendall(encode_request_frame(client.correlation, "early",
                                             build_request(api_key, version, **fields)))
    assert client.is_closed()
    assert f"api {api_key} before SASL authentication; closing" in caplog.text
    still_serving(broker)


def test_requests_between_handshake_and_authenticate_close_the_connection(broker, client):
    assert client.handshake("SCRAM-SHA-256").error_code == 0
    client.correlation += 1
    client.sock.sendall(encode_request_frame(client.correlation, "early",
                                             build_request(3, 12, topics=None)))
    assert client.is_closed()
    still_serving(broker)


def test_authenticate_before_handshake_is_an_illegal_state(broker, client):
    answer = client.authenticate(PLAIN_TOKEN)
    assert answer.error_code == ILLEGAL_SASL_STATE
    assert "must follow a successful SaslHandshake" in answer.error_message
    assert client.is_closed()


@pytest.mark.parametrize("mechanism, token, message", [
    ("PLAIN", b"\0alice\0wrong", "invalid username or password"),
    ("PLAIN", b"\0mallory\0alice-pw", "invalid username or password"),
    ("PLAIN", b"no-nul-bytes-at-all", "two NUL bytes"),
    ("PLAIN", b"\xff\0\xfe\0\xfd", "not UTF-8"),
    ("SCRAM-SHA-256", b"garbage", "GS2"),
    ("SCRAM-SHA-512", b"n,,n=alice", "n=<user>,r=<nonce>"),
    ("SCRAM-SHA-256", b"\x00" * 70_000, "larger than any"),
])
def test_bad_tokens_fail_with_a_message_then_close(broker, client, mechanism, token, message):
    assert client.handshake(mechanism).error_code == 0
    answer = client.authenticate(token)
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert message in answer.error_message
    assert mechanism in answer.error_message
    assert client.is_closed()
    still_serving(broker)


def test_scram_wrong_password_fails_at_the_proof(client):
    assert client.handshake("SCRAM-SHA-512").error_code == 0
    scram = ScramClient("SCRAM-SHA-512", "alice", "not-her-password")
    first = client.authenticate(scram.first())
    assert first.error_code == 0  # same answer as for a right password: no oracle here
    final = client.authenticate(scram.final(first.auth_bytes))
    assert final.error_code == SASL_AUTHENTICATION_FAILED
    assert "invalid username or password" in final.error_message
    assert client.is_closed()


def test_scram_unknown_user_looks_like_a_wrong_password(client):
    assert client.handshake("SCRAM-SHA-256").error_code == 0
    scram = ScramClient("SCRAM-SHA-256", "nobody", "pw")
    first = client.authenticate(scram.first())
    assert first.error_code == 0 and b",s=" in first.auth_bytes
    final = client.authenticate(scram.final(first.auth_bytes))
    assert final.error_code == SASL_AUTHENTICATION_FAILED
    assert "invalid username or password" in final.error_message


def test_a_second_handshake_during_the_exchange_closes(client):
    assert client.handshake("PLAIN").error_code == 0
    # A handshake is not a SaslAuthenticate: refused at the gate, connection closed.
    client.correlation += 1
    client.sock.sendall(encode_request_frame(client.correlation, "t",
                                             build_request(17, 1, mechanism="PLAIN")))
    assert client.is_closed()


def test_after_authentication_handshake_and_authenticate_are_illegal_but_harmless(client):
    client.login("PLAIN", "alice", "alice-pw")
    assert client.handshake("PLAIN").error_code == ILLEGAL_SASL_STATE
    again = client.authenticate(PLAIN_TOKEN)
    assert again.error_code == ILLEGAL_SASL_STATE
    assert "re-authentication is not supported" in again.error_message
    assert client.request(3, 12, topics=None).brokers  # still authenticated, still open


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_v0_handshake_then_raw_tokens(broker, client, mechanism):
    assert client.handshake(mechanism, version=0).error_code == 0
    if mechanism == "PLAIN":
        client.send_raw(PLAIN_TOKEN)
        assert client.read_raw() == b""
    else:
        scram = ScramClient(mechanism, "alice", "alice-pw")
        client.send_raw(scram.first())
        client.send_raw(scram.final(client.read_raw()))
        scram.verify(client.read_raw())
    assert client.request(3, 12, topics=None).cluster_id == broker.broker.config.cluster_id


def test_v0_raw_token_failure_closes_without_an_answer(client):
    assert client.handshake("PLAIN", version=0).error_code == 0
    client.send_raw(b"\0alice\0wrong")
    assert client.is_closed()


def test_huge_frames_before_authentication_are_refused(broker, client, caplog):
    caplog.set_level(logging.WARNING, logger="kipproducer.broker")
    client.sock.sendall((10 << 20).to_bytes(4, "big"))  # 10 MiB promised, nothing sent
    assert client.is_closed()
    assert "(sasl.server.max.receive.size); closing" in caplog.text
    still_serving(broker)


def test_users_added_while_running_can_log_in(broker, client):
    broker.broker.users.add("late", "late-pw", "SCRAM-SHA-256")
    client.login("SCRAM-SHA-256", "late", "late-pw")


def test_plain_works_for_a_user_with_only_a_sha256_credential(broker, client):
    broker.broker.users.add("sha256only", "pw256", "SCRAM-SHA-256")
    client.login("PLAIN", "sha256only", "pw256")


def test_without_sasl_the_sasl_apis_answer_illegal_state(embedded):
    plain = embedded()
    c = connect(plain.bootstrap_servers)
    try:
        shake = c.handshake("PLAIN")
        assert (shake.error_code, list(shake.mechanisms)) == (ILLEGAL_SASL_STATE, [])
        answer = c.authenticate(PLAIN_TOKEN)
        assert answer.error_code == ILLEGAL_SASL_STATE
        assert "SASL is not enabled" in answer.error_message
        assert c.request(3, 12, topics=None).brokers  # a plaintext listener serves on
    finally:
        c.close()


def test_unknown_mechanisms_in_the_config_are_refused():
    from kipproducer.broker.broker import Broker
    from kipproducer.broker.broker_config import BrokerConfigError

    with pytest.raises(BrokerConfigError, match="unsupported mechanism 'GSSAPI'"):
        Broker("/nonexistent", config={"sasl.enabled.mechanisms": "PLAIN,GSSAPI"})
    with pytest.raises(BrokerConfigError, match="User:name"):
        Broker("/nonexistent", config={"super.users": "admin"})


def test_error_code_names():
    assert ec.error_name(SASL_AUTHENTICATION_FAILED) == "SASL_AUTHENTICATION_FAILED"
    assert ec.error_name(UNSUPPORTED_SASL_MECHANISM) == "UNSUPPORTED_SASL_MECHANISM"
    assert ec.error_name(ILLEGAL_SASL_STATE) == "ILLEGAL_SASL_STATE"
