"""ClusterQueries.close() leaves no task pending on its loop, even after a call gave up."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from kipproducer.engine.cluster_queries import ClusterQueries


@pytest.fixture()
def silent_peer():
    """A listener that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def test_close_during_a_call_leaves_nothing_pending(silent_peer):
    """A call still connecting (the peer never answers) when the client is closed: its tasks
    are cancelled and awaited before the loop closes, not left to be destroyed pending."""
    queries = ClusterQueries({"bootstrap.servers": silent_peer}, timeout_s=30)
    loop = queries._loop
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            queries.list_offsets({("t", 0): -1})
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 10
    while not [t for t in asyncio.all_tasks(loop) if not t.done()]:
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.01)
    time.sleep(0.2)
    queries.close()
    assert loop.is_closed()
    assert [task for task in asyncio.all_tasks(loop) if not task.done()] == []
    caller.join(10)
    assert not caller.is_alive() and outcome, "the call did not end when the client closed"
