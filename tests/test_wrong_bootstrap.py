"""A wrong bootstrap address gives a few clear lines naming it, not a wall of librdkafka logs:
librdkafka's log lines go through Python logging (``kipproducer.librdkafka``, repeats dropped),
for the Producer's own handle and for the internal clients of kip mirror, kip groups and
kip transactions."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

MAX_STDERR_LINES = 3



def run(args: list[str], timeout: float = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def check_stderr(done: subprocess.CompletedProcess[str], address: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert 1 <= len(lines) <= MAX_STDERR_LINES, done.stderr[-5000:]
    assert any(address in line for line in lines), done.stderr[-5000:]


PRODUCE = """
import logging, sys
from kipproducer import Producer
{setup}
p = Producer({{"bootstrap.servers": sys.argv[1]{extra}}})
p.produce("orders", b"x")
print("not delivered:", p.flush(4))
"""


def test_producer(dead_address: str) -> None:
    done = run(["-c", PRODUCE.format(setup="", extra=""), dead_address])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "not delivered: 1"
    check_stderr(done, dead_address)


def test_producer_log_level_is_the_applications(dead_address: str) -> None:
    quiet = 'logging.getLogger("kipproducer.librdkafka").setLevel(logging.CRITICAL)'
    done = run(["-c", PRODUCE.format(setup=quiet, extra=""), dead_address])
    assert done.returncode == 0 and done.stdout.strip() == "not delivered: 1", done.stderr
    assert done.stderr == ""


def test_producer_keeps_the_users_logger(dead_address: str) -> None:
    setup = textwrap.dedent("""
        seen = []
        class Mine(logging.Logger):
            def log(self, level, msg, *args, **kw):
                seen.append(msg % args)
        import atexit
        atexit.register(lambda: print("mine:", len(seen) > 0))
    """)
    done = run(["-c", PRODUCE.format(setup=setup, extra=', "logger": Mine("mine")'),
                dead_address])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["not", "delivered:", "1", "mine:", "True"], done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("command", [
    ["mirror", "--source", "{a}", "--target", "{a}", "--topics", "orders", "--once"],
    ["groups", "--bootstrap-server", "{a}", "list"],
    ["groups", "--bootstrap-server", "{a}", "describe", "db1"],
    ["transactions", "--bootstrap-server", "{a}", "list"],
], ids=lambda c: " ".join(c[:1] + c[3:4]))
def test_kip_commands(command: list[str], dead_address: str) -> None:
    done = run(["-m", "kipproducer", *(w.format(a=dead_address) for w in command)])
    assert done.returncode != 0, done.stdout
    check_stderr(done, dead_address)


APPEND = """
import sys
from confluent_kafka import KafkaException
from kipproducer import Producer
p = Producer({{"bootstrap.servers": sys.argv[1], "message.timeout.ms": {delivery_ms}}})
try:
    p.append("orders", [b"x"], partition=0{timeout})
except KafkaException as exc:
    print(exc.args[0].name(), "|", exc.args[0].str())
"""


@pytest.mark.parametrize(("delivery_ms", "timeout"), [(1500, ""), (30_000, ", timeout=2")],
                         ids=["delivery-timeout", "timeout"])
def test_append_names_the_address(dead_address: str, delivery_ms: int, timeout: str) -> None:
    """append() on a wrong bootstrap: its error says the address could not be reached (both
    when delivery.timeout.ms fails the records and when its own timeout ends the wait), not
    only _MSG_TIMED_OUT / _TIMED_OUT."""
    done = run(["-c", APPEND.format(delivery_ms=delivery_ms, timeout=timeout), dead_address])
    assert done.returncode == 0, done.stderr[-3000:]
    name, _, text = done.stdout.strip().partition(" | ")
    assert name == ("_TIMED_OUT" if timeout else "_MSG_TIMED_OUT"), done.stdout
    assert "no broker could be reached" in text and dead_address in text, done.stdout
    assert len(done.stderr.strip().splitlines()) <= MAX_STDERR_LINES, done.stderr[-3000:]


def test_kip_tools_take_a_bootstrap_list(dead_address: str, embedded) -> None:
    """kip groups / configs / transactions connect through BlockingClient: like any Kafka
    client it takes a comma-separated bootstrap list, skips a node that is down, and names
    every address when none answers."""
    from kipproducer.blocking_client import BlockingClient

    broker = embedded()
    with BlockingClient(f"{dead_address},{broker.bootstrap_servers}") as client:
        assert client.sock.getpeername()[1] == int(broker.bootstrap_servers.rsplit(":", 1)[1])
    other = dead_address.rsplit(":", 1)[0] + ":1"
    with pytest.raises(OSError, match="cannot connect to any bootstrap server") as info:
        BlockingClient(f"{dead_address}, {other}")
    assert dead_address in str(info.value) and other in str(info.value)
    with pytest.raises(ValueError, match="'nonsense' is not HOST:PORT"):
        BlockingClient(f"{dead_address},nonsense")
