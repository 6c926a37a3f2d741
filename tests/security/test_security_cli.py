"""``kip users``, ``kip acls`` and ``kip broker --sasl`` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from integration_support import broker_env
from security_support import ADMIN, ADMIN_PASSWORD, ALL_MECHANISMS, sasl_conf, unique


def kip(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kipproducer", *args], input=stdin,
                          capture_output=True, text=True, env=broker_env(), timeout=60)


def produce_error(conf: dict, topic: str, timeout: float = 5) -> KafkaError | None:
    producer = Producer({**conf, "message.timeout.ms": int(timeout * 1000)})
    reports: list = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(timeout + 5)
    return reports[0]


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


# -- kip users -----------------------------------------------------------------------------------


def test_users_add_list_remove(tmp_path: Path):
    data = str(tmp_path / "data")
    added = kip("users", "add", "alice", "--password", "s3cret-pw", "--data-dir", data)
    assert added.returncode == 0, added.stderr
    assert "SCRAM-SHA-256, SCRAM-SHA-512 credentials stored" in added.stdout
    piped = kip("users", "add", "bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
                "--data-dir", data, stdin="piped-pw\n")
    assert piped.returncode == 0, piped.stderr
    listing = kip("users", "list", "--data-dir", data)
    assert listing.stdout.splitlines() == [
        "alice\tSCRAM-SHA-256 (4096 iterations), SCRAM-SHA-512 (4096 iterations)",
        "bob\tSCRAM-SHA-512 (8192 iterations)",
    ]
    users_file = tmp_path / "data" / "security" / "users.json"
    text = users_file.read_text()
    assert "s3cret-pw" not in text and "piped-pw" not in text
    assert oct(os.stat(users_file).st_mode & 0o777) == "0o600"
    assert json.loads(text)["users"]["bob"]["SCRAM-SHA-512"]["iterations"] == 8192

    removed = kip("users", "remove", "alice", "--data-dir", data)
    assert removed.returncode == 0 and "user alice: removed" in removed.stdout
    again = kip("users", "remove", "alice", "--data-dir", data)
    assert again.returncode == 2 and "user alice has no credentials" in again.stderr


@pytest.mark.parametrize("args, message", [
    (("users", "add", "x", "--password", "p", "--iterations", "10"), "4096..16384"),
    (("users", "add", "x", "--password", ""), "cannot be empty"),
])
def test_users_bad_input(tmp_path: Path, args, message):
    done = kip(*args, "--data-dir", str(tmp_path))
    assert done.returncode == 2 and message in done.stderr


# -- kip broker --sasl ---------------------------------------------------------------------------


def test_broker_sasl_flag_and_a_bad_mechanism(tmp_path: Path):
    data = tmp_path / "data"
    assert kip("users", "add", "sam", "--password", "sam-pw", "--data-dir", str(data)
               ).returncode == 0
    bad = kip("broker", "--listen", "127.0.0.1:0", "--data-dir", str(data), "--sasl", "GSSAPI")
    assert bad.returncode == 2
    assert "unsupported mechanism 'GSSAPI'" in bad.stderr

    proc = subprocess.Popen(
        [sys.executable, "-m", "kipproducer", "broker", "--listen", "127.0.0.1:0",
         "--data-dir", str(data), "--sasl", "SCRAM-SHA-256"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=broker_env(), text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        bootstrap = line.split()[-1]
        conf = sasl_conf(bootstrap, "SCRAM-SHA-256", "sam", "sam-pw")
        assert produce_error(conf, unique("flag"), timeout=15) is None
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0


# -- kip acls ------------------------------------------------------------------------------------


@pytest.fixture
def acl_broker(kip_broker, tmp_path: Path):
    """A ``kip broker`` with SASL and the authorizer; admin (super user) and bob exist."""
    data = tmp_path / "acl-data"
    for user, password in ((ADMIN, ADMIN_PASSWORD), ("bob", "bob-pw")):
        assert kip("users", "add", user, "--password", password, "--data-dir", str(data)
                   ).returncode == 0
    return kip_broker({"sasl.enabled.mechanisms": ALL_MECHANISMS,
                       "authorizer.enabled": "true", "super.users": f"User:{ADMIN}"},
                      data_dir=data)


def test_acls_offline_edits_reach_a_running_broker(acl_broker):
    data = str(acl_broker.data_dir)
    topic = unique("cli")
    bob = sasl_conf(acl_broker.bootstrap, "PLAIN", "bob", "bob-pw")
    err = produce_error(bob, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    added = kip("acls", "--data-dir", data, "--add", "--allow-principal", "User:bob",
                "--producer", "--topic", topic)
    assert added.returncode == 0, added.stderr
    assert "added 3 ACL binding(s)" in added.stdout
    listing = kip("acls", "--data-dir", data, "--list", "--topic", topic)
    assert listing.stdout.splitlines() == [
        f"Topic:Literal:{topic}",
        "    Allow User:bob Write from host *",
        "    Allow User:bob Create from host *",
        "    Allow User:bob Describe from host *",
    ]
    # The broker reloads the changed file (checked at most every half second).
    assert wait_for(lambda: produce_error(bob, topic) is None)
    acl_broker.wait_for_log("acls.json (changed on disk)")

    removed = kip("acls", "--data-dir", data, "--remove", "--allow-principal", "User:bob",
                  "--operation", "Write", "--topic", topic)
    assert removed.returncode == 0 and "removed 1 ACL binding(s)" in removed.stdout
    assert wait_for(lambda: (e := produce_error(bob, topic)) is not None
                    and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    everything = kip("acls", "--data-dir", data, "--remove", "--topic", topic)
    assert "removed 2 ACL binding(s)" in everything.stdout
    assert kip("acls", "--data-dir", data, "--list").stdout == ""


def test_acls_online_with_command_config(acl_broker, tmp_path: Path):
    config = tmp_path / "admin.properties"
    config.write_text("# as for kafka-acls --command-config\n"
                      "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                      'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule'
                      f' required username="{ADMIN}" password="{ADMIN_PASSWORD}";\n')
    online = ("--bootstrap-server", acl_broker.bootstrap, "--command-config", str(config))
    added = kip("acls", *online, "--add", "--allow-principal", "User:bob",
                "--operation", "ReplicatorWrite", "--cluster")
    assert added.returncode == 0, added.stderr
    listing = kip("acls", *online, "--list", "--cluster")
    assert listing.stdout.splitlines() == [
        "Cluster:Literal:kafka-cluster",
        "    Allow User:bob ReplicatorWrite from host *",
    ]
    prefixed = kip("acls", *online, "--add", "--deny-principal", "User:*", "--operation",
                   "Read", "--topic", "secret.", "--resource-pattern-type", "prefixed")
    assert prefixed.returncode == 0, prefixed.stderr
    match = kip("acls", *online, "--list", "--topic", "secret.plans",
                "--resource-pattern-type", "match")
    assert "Topic:Prefixed:secret." in match.stdout
    removed = kip("acls", *online, "--remove", "--cluster")
    assert "removed 1 ACL binding(s)" in removed.stdout

    bob = tmp_path / "bob.properties"
    bob.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                   "sasl.username=bob\nsasl.password=bob-pw\n")
    refused = kip("acls", "--bootstrap-server", acl_broker.bootstrap, "--command-config",
                  str(bob), "--list")
    assert refused.returncode == 2
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.username=bob\nsasl.password=nope\n")
    failed = kip("acls", "--bootstrap-server", acl_broker.bootstrap, "--command-config",
                 str(wrong), "--list")
    assert failed.returncode == 2 and "invalid username or password" in failed.stderr


@pytest.mark.parametrize("args, message", [
    (("--add", "--allow-principal", "bob", "--topic", "t"), "Type:name"),
    (("--add", "--allow-principal", "User:bob", "--operation", "Write", "--group", "g"),
     "does not apply to Group"),
    (("--add", "--allow-principal", "User:bob", "--operation", "Fly", "--topic", "t"),
     "unknown AclOperation 'Fly'"),
    (("--add", "--allow-principal", "User:bob"), "name a resource"),
    (("--add", "--topic", "t"), "--allow-principal or --deny-principal"),
    (("--add", "--allow-principal", "User:b", "--topic", "t", "--resource-pattern-type",
      "match"), "literal or prefixed"),
    (("--add", "--consumer", "--allow-principal", "User:b", "--topic", "t"),
     "--consumer needs --topic and --group"),
])
def test_acls_bad_input(tmp_path: Path, args, message):
    done = kip("acls", "--data-dir", str(tmp_path), *args)
    assert done.returncode == 2, done.stdout
    assert message in done.stderr


def test_acls_needs_exactly_one_place(tmp_path: Path):
    done = kip("acls", "--list")
    assert done.returncode == 2 and "exactly one of --data-dir" in done.stderr
