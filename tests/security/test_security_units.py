"""The security building blocks on their own: SCRAM math, stores, authorizer decisions."""

from __future__ import annotations

import json
import os
import stat

import pytest
from security_support import allow, deny

from kipproducer.broker.security import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclStore,
    AuthenticationFailed,
    Authorizer,
    MalformedToken,
    PatternType,
    ResourceType,
    UserStore,
)
from kipproducer.broker.security.authorizer import parse_super_users
from kipproducer.broker.security.sasl import PlainServer
from kipproducer.sasl import scram as scram_module
from kipproducer.sasl.scram import (
    ScramClient,
    ScramServer,
    credential_from_salted_password,
    make_credential,
    salted_password,
)

Op, Res = AclOperation, ResourceType

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = "W22ZaJ0SNY7soEsUEjb6gQ=="
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


# -- SCRAM ----------------------------------------------------------------------------------------


def test_scram_server_reproduces_the_rfc_7677_exchange(monkeypatch):
    import base64

    salt = base64.b64decode(RFC_SALT)
    cred = make_credential("SCRAM-SHA-256", "pencil", salt=salt)
    monkeypatch.setattr(scram_module.secrets, "token_urlsafe", lambda n: RFC_SERVER_NONCE)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, b"secret")
    server_first = server.step(b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode())
    assert server_first == (f"r={RFC_CLIENT_NONCE}{RFC_SERVER_NONCE},s={RFC_SALT},i=4096"
                            .encode())
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_scram_client_reproduces_the_rfc_7677_exchange():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode()
    server_first = f"r={RFC_CLIENT_NONCE}{RFC_SERVER_NONCE},s={RFC_SALT},i=4096".encode()
    assert client.final(server_first) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_wrong_password(mechanism):
    cred = make_credential(mechanism, "s3cret", iterations=4096)
    for password, ok in (("s3cret", True), ("wrong", False)):
        server = ScramServer(mechanism, {"bob,=x": cred}.get, b"k")
        client = ScramClient(mechanism, "bob,=x", password)  # ',' and '=' are escaped
        server_first = server.step(client.first())
        client_final = client.final(server_first)
        if ok:
            client.verify(server.step(client_final))
            assert server.username == "bob,=x"
        else:
            with pytest.raises(AuthenticationFailed, match="invalid username or password"):
                server.step(client_final)


def test_unknown_scram_user_gets_a_stable_decoy_salt_then_fails():
    def exchange():
        server = ScramServer("SCRAM-SHA-512", {}.get, b"broker-secret")
        client = ScramClient("SCRAM-SHA-512", "nobody", "pw")
        first = server.step(client.first())
        with pytest.raises(AuthenticationFailed, match="invalid username or password"):
            server.step(client.final(first))
        return first.split(b",")[1]  # s=<salt>

    assert exchange() == exchange()


@pytest.mark.parametrize("token, message", [
    (b"", "GS2 header"),
    (b"\xff\xfe", "not UTF-8"),
    (b"p=tls-unique,,n=u,r=abc", "channel binding"),
    (b"n,,r=abc,n=u", "n=<user>,r=<nonce>"),
    (b"n,,n=,r=abc", "names no user"),
    (b"n,,n=a=ZZb,r=abc", "invalid escape"),
    (b"n,,n=u,r=", "nonce"),
    (b"n,,n=u,r=abc,tokenauth=true", "delegation token"),
    (b"n,a=other,n=u,r=abc", "authorization id"),
])
def test_malformed_scram_client_first(token, message):
    server = ScramServer("SCRAM-SHA-256", lambda _: None, b"k")
    with pytest.raises(AuthenticationFailed, match=message):
        server.step(token)


def test_scram_client_final_checks_nonce_and_binding():
    cred = make_credential("SCRAM-SHA-256", "pw")
    for tamper, message in ((lambda f: f.replace(b"r=", b"r=X"), "nonce"),
                            (lambda f: f.replace(b"c=biws", b"c=eSws"), "channel-binding"),
                            (lambda f: f.split(b",p=")[0], "no proof"),
                            (lambda f: f + b"!!", "base64")):
        server = ScramServer("SCRAM-SHA-256", {"u": cred}.get, b"k")
        client = ScramClient("SCRAM-SHA-256", "u", "pw")
        final = client.final(server.step(client.first()))
        with pytest.raises(AuthenticationFailed, match=message):
            server.step(tamper(final))


def test_credential_from_salted_password_matches_make_credential():
    cred = make_credential("SCRAM-SHA-512", "pw", salt=b"salt" * 4, iterations=5000)
    salted = salted_password("SCRAM-SHA-512", "pw", b"salt" * 4, 5000)
    assert credential_from_salted_password("SCRAM-SHA-512", b"salt" * 4, 5000, salted) == cred


def test_iterations_are_bounded():
    with pytest.raises(ValueError, match="4096..16384"):
        make_credential("SCRAM-SHA-256", "pw", iterations=100)


# -- PLAIN ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("token, error, message", [
    (b"\0alice\0right", None, None),
    (b"alice\0alice\0right", None, None),
    (b"\0alice\0wrong", AuthenticationFailed, "invalid username or password"),
    (b"bob\0alice\0right", AuthenticationFailed, "authorization id"),
    (b"alice-right", MalformedToken, "two NUL bytes"),
    (b"\0\0right", MalformedToken, "empty username"),
    (b"\0al\xffice\0right", MalformedToken, "not UTF-8"),
])
def test_plain_tokens(token, error, message):
    server = PlainServer(lambda user, pw: (user, pw) == ("alice", "right"))
    if error is None:
        assert server.step(token) == b"" and server.username == "alice"
    else:
        with pytest.raises(error, match=message):
            server.step(token)


# -- the user store -------------------------------------------------------------------------------


def test_user_store_keeps_no_password_and_is_private(tmp_path):
    users = UserStore(tmp_path)
    users.add("alice", "very-secret-password")
    text = users.path.read_text()
    assert "very-secret-password" not in text
    doc = json.loads(text)
    assert set(doc["users"]["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert set(doc["users"]["alice"]["SCRAM-SHA-256"]) == {
        "salt", "iterations", "stored_key", "server_key"}
    assert stat.S_IMODE(os.stat(users.path).st_mode) == 0o600
    assert users.verify_password("alice", "very-secret-password")
    assert not users.verify_password("alice", "nope")
    assert not users.verify_password("bob", "very-secret-password")


def test_user_store_changes_are_seen_by_another_instance(tmp_path):
    first, second = UserStore(tmp_path), UserStore(tmp_path)
    assert second.credential("alice", "SCRAM-SHA-256") is None
    first.add("alice", "pw", "SCRAM-SHA-256")
    assert second.credential("alice", "SCRAM-SHA-256") is not None
    assert second.credential("alice", "SCRAM-SHA-512") is None
    second.add("alice", "pw2", ["SCRAM-SHA-512"])
    assert [u.mechanisms for u in first.users()] == [{"SCRAM-SHA-256": 4096,
                                                     "SCRAM-SHA-512": 4096}]
    # PLAIN prefers the SHA-512 credential, which now holds the newer password.
    assert first.verify_password("alice", "pw2")
    assert first.remove("alice", "SCRAM-SHA-512")
    assert not first.remove("alice", "SCRAM-SHA-512")
    assert first.remove("alice") and "alice" not in second


@pytest.mark.parametrize("name, mechanism, message", [
    ("", None, "empty"),
    ("a\nb", None, "control"),
    ("ok", "SCRAM-SHA-1", "unknown SCRAM mechanism"),
])
def test_user_store_refuses_bad_input(tmp_path, name, mechanism, message):
    with pytest.raises(ValueError, match=message):
        UserStore(tmp_path).add(name, "pw", mechanism)


# -- ACL bindings and filters ---------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (("Any", "t", "User:a", "Read"), "not a concrete type"),
    (("Topic", "t", "User:a", "Any"), "not a concrete operation"),
    (("Topic", "", "User:a", "Read"), "cannot be empty"),
    (("Cluster", "c", "User:a", "Alter"), "kafka-cluster"),
    (("Topic", "t", "alice", "Read"), "Type:name"),
    (("Group", "g", "User:a", "Write"), "does not apply to Group"),
    (("Topic", "t", "User:a", "ReplicatorWrite"), "does not apply to Topic"),
])
def test_invalid_bindings(args, message):
    with pytest.raises(ValueError, match=message):
        AclBinding.of(*args)


def test_names_parse_in_every_kafka_spelling():
    assert Op.parse("ReplicatorWrite") is Op.parse("REPLICATOR_WRITE") is Op.REPLICATOR_WRITE
    assert int(Op.REPLICATOR_WRITE) == 29
    assert Op.parse("describe-configs") is Op.DESCRIBE_CONFIGS
    assert Res.parse("TransactionalId").kafka_name == "TransactionalId"
    with pytest.raises(ValueError, match="known: .*ReplicatorWrite"):
        Op.parse("Replicate")


def test_filter_match_pattern_finds_every_binding_that_applies():
    bindings = [
        allow("User:a", "Read", name="orders"),
        allow("User:a", "Read", name="*"),
        allow("User:a", "Read", name="ord", pattern_type="Prefixed"),
        allow("User:a", "Read", name="other"),
        allow("User:a", "Read", name="orders-x", pattern_type="Prefixed"),
    ]
    match = AclFilter(Res.TOPIC, "orders", PatternType.MATCH)
    assert [b.resource_name for b in bindings if match.matches(b)] == ["orders", "*", "ord"]
    literal = AclFilter(Res.TOPIC, "orders", PatternType.LITERAL)
    assert [b.resource_name for b in bindings if literal.matches(b)] == ["orders"]
    anything = AclFilter(principal="User:a", operation=Op.READ)
    assert all(anything.matches(b) for b in bindings)
    assert not AclFilter(principal="User:b").matches(bindings[0])


# -- authorizer decisions -------------------------------------------------------------------------


def _authorizer(tmp_path, bindings, **kw) -> Authorizer:
    store = AclStore(tmp_path, check_every_s=0)
    if bindings:
        store.add(bindings)
    return Authorizer(store, **kw)


def test_deny_overrides_allow_and_all_covers_everything(tmp_path):
    auth = _authorizer(tmp_path, [
        allow("User:a", "All", name="t"),
        deny("User:a", "Write", name="t"),
    ])
    assert auth.authorize("User:a", Op.READ, Res.TOPIC, "t")
    assert not auth.authorize("User:a", Op.WRITE, Res.TOPIC, "t")
    assert not auth.authorize("User:b", Op.READ, Res.TOPIC, "t")


def test_implied_operations_only_from_allow(tmp_path):
    auth = _authorizer(tmp_path, [
        allow("User:a", "Write", name="t"),
        allow("User:a", "AlterConfigs", name="t"),
        allow("User:b", "Describe", name="t"),
        deny("User:b", "Read", name="t"),
    ])
    assert auth.authorize("User:a", Op.DESCRIBE, Res.TOPIC, "t")
    assert auth.authorize("User:a", Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not auth.authorize("User:a", Op.READ, Res.TOPIC, "t")
    # A DENY of READ does not deny DESCRIBE (Kafka applies implication to ALLOW only).
    assert auth.authorize("User:b", Op.DESCRIBE, Res.TOPIC, "t")


def test_wildcards_prefixes_and_hosts(tmp_path):
    auth = _authorizer(tmp_path, [
        allow("User:*", "Read", name="public", pattern_type="Prefixed"),
        allow("User:a", "Write", name="*"),
        deny("User:a", "Write", name="secret"),
        allow("User:c", "Read", name="t", host="10.0.0.1"),
    ])
    assert auth.authorize("User:anyone", Op.READ, Res.TOPIC, "public.events")
    assert not auth.authorize("User:anyone", Op.READ, Res.TOPIC, "pub")
    assert auth.authorize("User:a", Op.WRITE, Res.TOPIC, "whatever")
    assert not auth.authorize("User:a", Op.WRITE, Res.TOPIC, "secret")
    assert auth.authorize("User:c", Op.READ, Res.TOPIC, "t", "10.0.0.1")
    assert not auth.authorize("User:c", Op.READ, Res.TOPIC, "t", "10.0.0.2")


def test_allow_everyone_only_where_no_acl_names_the_resource(tmp_path):
    auth = _authorizer(tmp_path, [allow("User:a", "Write", name="guarded")],
                       allow_everyone_if_no_acl_found=True)
    assert auth.authorize("User:b", Op.WRITE, Res.TOPIC, "free")
    assert auth.authorize("User:b", Op.ALTER, Res.CLUSTER, "kafka-cluster")
    assert not auth.authorize("User:b", Op.WRITE, Res.TOPIC, "guarded")
    strict = Authorizer(auth.store)
    assert not strict.authorize("User:b", Op.WRITE, Res.TOPIC, "free")


def test_super_users(tmp_path):
    auth = _authorizer(tmp_path, [deny("User:root", "All", name="t")],
                       super_users=parse_super_users("User:root; User:ops"))
    assert auth.authorize("User:root", Op.WRITE, Res.TOPIC, "t")
    assert auth.authorize("User:ops", Op.REPLICATOR_WRITE, Res.CLUSTER, "kafka-cluster")
    with pytest.raises(ValueError, match="User:name"):
        parse_super_users("root")


def test_authorize_any_for_idempotent_producers(tmp_path):
    auth = _authorizer(tmp_path, [
        allow("User:a", "Write", name="t"),
        allow("User:b", "Write", name="t"),
        deny("User:b", "Write", name="t"),
        allow("User:c", "Write", name="p-", pattern_type="Prefixed"),
    ])
    assert auth.authorize_any("User:a", Op.WRITE, Res.TOPIC)
    assert not auth.authorize_any("User:b", Op.WRITE, Res.TOPIC)
    assert auth.authorize_any("User:c", Op.WRITE, Res.TOPIC)
    assert not auth.authorize_any("User:d", Op.WRITE, Res.TOPIC)


def test_acl_store_is_durable_deduplicated_and_reloaded(tmp_path):
    store, other = AclStore(tmp_path, check_every_s=0), AclStore(tmp_path, check_every_s=0)
    binding = allow("User:a", "Write", name="t")
    assert store.add([binding, binding]) == 1
    assert store.add([binding]) == 0
    assert other.list() == [binding]
    removed = other.remove([AclFilter(principal="User:a"), AclFilter(principal="User:z")])
    assert removed == [[binding], []]
    assert store.list() == []
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_a_corrupt_acl_file_fails_loudly_then_keeps_the_last_good_state(tmp_path):
    from kipproducer.broker.security import StoreError

    store = AclStore(tmp_path, check_every_s=0)
    store.add([allow("User:a", "Write", name="t")])
    store.path.write_text("{not json")
    fresh = AclStore(tmp_path, check_every_s=0)
    with pytest.raises(StoreError, match="acls.json"):
        fresh.load()
    assert len(store.list()) == 1  # the running copy keeps what it had
