"""The engine's connection layer on Apache Kafka's own TLS and SASL listeners (a 1-node
cluster with an SSL listener, PEM keystores from a trustme CA, and a SASL_PLAINTEXT listener
with PLAIN, SCRAM-SHA-256/512 users made at format time, and unsecured OAUTHBEARER).

Every engine path (produce_arrays, produce_batch, a transaction, an emulated KIP-391 copy)
logs in and writes through each; what was written is read back by librdkafka over the same
listener. A wrong password and an untrusted CA get one clear error, never a hang.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import KafkaException
from kafka_cluster import KafkaCluster
from kafka_support import rdkafka_read
from scenario_support import unique

from kipproducer import Producer


@pytest.fixture
def secured(kafka1_secured: KafkaCluster) -> KafkaCluster:
    return kafka1_secured


def listener_config(cluster: KafkaCluster, how: str) -> dict:
    if how == "tls":
        return {"bootstrap.servers": cluster.bootstrap_for("SSL"), "security.protocol": "ssl",
                "ssl.ca.location": str(cluster.security.ca_pem)}
    base = {"bootstrap.servers": cluster.bootstrap_for("SASL_PLAINTEXT"),
            "security.protocol": "sasl_plaintext"}
    if how == "plain":
        return {**base, "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                "sasl.password": cluster.security.plain_users["admin"]}
    if how.startswith("scram"):
        return {**base, "sasl.mechanism": how.upper(), "sasl.username": "alice",
                "sasl.password": cluster.security.scram_users["alice"]}
    assert how == "oauthbearer"
    return {**base, "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=admin"}


HOWS = ["tls", "plain", "scram-sha-256", "scram-sha-512", "oauthbearer"]


@pytest.mark.parametrize("how", HOWS)
def test_every_engine_path_through_the_listener(secured: KafkaCluster, how: str) -> None:
    conf = listener_config(secured, how)
    topic = secured.unique_topic(f"sec-{how}")
    reports: list = []
    with Producer({**conf, "enable.idempotence": True, "acks": "all"}) as p:
        p.produce_arrays(topic, np.array([b"a%d" % i for i in range(100)], dtype=object),
                         on_delivery=lambda err, rep: reports.append(err))
        assert p.produce_batch(topic, [{"value": b"b%d" % i} for i in range(100)],
                               on_delivery=lambda err, msg: reports.append(err)) == 100
        assert p.flush(60) == 0
    assert all(err is None for err in reports), reports[:3]
    with Producer({**conf, "transactional.id": unique(f"sec-{how}")}) as p:
        p.init_transactions(60)
        p.begin_transaction()
        p.produce_arrays(topic, np.array([b"t%d" % i for i in range(100)], dtype=object))
        p.commit_transaction(60)
    with Producer({**conf, "kip.mode": "auto",
                   "kip.emulation.transactional.id": unique("sec-copier")}) as p:
        assert p.kip_mode(topic) == "emulated"
        p.append(topic, [b"o400", b"o410"], partition=0,
                 offsets=np.array([400, 410], np.int64))
    log = rdkafka_read(conf["bootstrap.servers"], topic, 1,
                       config={k: v for k, v in conf.items() if k != "bootstrap.servers"})[0]
    values = [v for _, _, v in log]
    assert values[:300] == ([b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(100)]
                            + [b"t%d" % i for i in range(100)])
    assert [(o, v) for o, _, v in log[300:]] == [(400, b"o400"), (410, b"o410")]


def _refused(conf: dict, topic: str) -> str:
    """The error a bulk call gets when the engine cannot log in: raised at the call (it
    needs the topic's metadata first), naming the broker and why."""
    with Producer({**conf, "message.timeout.ms": 10_000}) as p:
        started = time.monotonic()
        with pytest.raises(KafkaException) as info:
            p.produce_arrays(topic, np.array([b"x"], dtype=object))
        assert time.monotonic() - started < 30
    return str(info.value)


def test_a_wrong_password_is_one_clear_error(secured: KafkaCluster) -> None:
    conf = {**listener_config(secured, "scram-sha-256"), "sasl.password": "wrong"}
    message = _refused(conf, secured.unique_topic("sec-wrong"))
    assert "_AUTHENTICATION" in message and "invalid credentials" in message, message


def test_an_untrusted_certificate_is_one_clear_error(secured: KafkaCluster,
                                                     tmp_path: Path) -> None:
    import trustme
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    conf = {**listener_config(secured, "tls"), "ssl.ca.location": str(other)}
    message = _refused(conf, secured.unique_topic("sec-untrusted"))
    assert "certificate" in message.lower(), message


@pytest.mark.parametrize("claims", ["expired", "issued-in-the-future"])
def test_a_refused_token_is_one_clear_error(secured: KafkaCluster, claims: str) -> None:
    """Kafka refuses an OAUTHBEARER token with a JSON error in the SaslAuthenticate answer,
    not an error code: the engine ends that exchange and names the refusal (before, it went
    on as if logged in and every later request was answered ILLEGAL_SASL_STATE)."""
    now = time.time()
    life = {"expired": (now - 100, now - 10), "issued-in-the-future": (now + 60, now + 3600)}
    iat, exp = life[claims]

    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    token = f"{b64({'alg': 'none'})}.{b64({'sub': 'admin', 'iat': iat, 'exp': exp})}."
    conf = {k: v for k, v in listener_config(secured, "oauthbearer").items()
            if not k.startswith(("enable.sasl", "sasl.oauthbearer"))}
    conf["oauth_cb"] = lambda _config: (token, now + 3600)
    message = _refused(conf, secured.unique_topic("sec-token"))
    assert "_AUTHENTICATION" in message and "refused the token" in message, message
    assert "invalid_token" in message and "ILLEGAL_SASL_STATE" not in message, message
