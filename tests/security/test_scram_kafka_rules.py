"""Where Kafka's SCRAM differs from the scramp library's, and what sasl/scram.py does about it:
the password is taken as UTF-8 without SASLprep (stored credentials as Kafka derives them, so a
stock client logs in with a password SASLprep would change), the project's own client refuses
such a password by name instead of sending a proof no Kafka broker accepts, and an
authorization id is refused."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from security_support import sasl_conf

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AuthenticationFailed
from kipproducer.sasl.scram import ScramClient, ScramServer, make_credential

#: a no-break space: SASLprep maps it to a space, Kafka keeps it
CHANGED_BY_SASLPREP = "pencil\u00a0sharp"


def test_a_stored_credential_is_derived_from_the_raw_utf8_password():
    cred = make_credential("SCRAM-SHA-256", CHANGED_BY_SASLPREP, salt=b"s" * 16)
    salted = hashlib.pbkdf2_hmac("sha256", CHANGED_BY_SASLPREP.encode(), b"s" * 16, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert cred.stored_key == hashlib.sha256(client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", "sha256").digest()


def test_librdkafka_logs_in_with_a_password_saslprep_would_change():
    with EmbeddedBroker(config={"sasl.enabled.mechanisms": "SCRAM-SHA-256"}) as broker:
        broker.broker.users.add("carol", CHANGED_BY_SASLPREP, "SCRAM-SHA-256")
        for password, ok in ((CHANGED_BY_SASLPREP, True), ("pencil sharp", False)):
            errors: list[KafkaError] = []
            admin = AdminClient(sasl_conf(broker.bootstrap_servers, "SCRAM-SHA-256", "carol",
                                          password, error_cb=errors.append))
            if ok:
                assert admin.list_topics(timeout=10).brokers
            else:  # the password SASLprep makes of it is another password to Kafka
                with pytest.raises(KafkaException):
                    admin.list_topics(timeout=5)
                deadline = time.monotonic() + 10
                while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                    assert time.monotonic() < deadline, errors
                    admin.poll(0.2)


@pytest.mark.parametrize("username, password, message", [
    ("carol", CHANGED_BY_SASLPREP, "password changes under SASLprep"),
    ("carol", "\U0001F512", "password is refused by SASLprep"),
    ("\ufb01le", "pw", "user name changes under SASLprep"),
])
def test_the_client_names_what_saslprep_would_change(username, password, message):
    with pytest.raises(AuthenticationFailed, match=message):
        ScramClient("SCRAM-SHA-256", username, password)


def test_an_authorization_id_is_refused_even_when_it_is_the_user():
    server = ScramServer("SCRAM-SHA-256", lambda _: None, b"k")
    with pytest.raises(AuthenticationFailed, match="authorization id is not supported"):
        server.step(b"n,a=u,n=u,r=abc")
