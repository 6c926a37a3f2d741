"""The engine's accumulator lock: threading.Lock's contract, and the sender thread first."""

import threading
import time

import pytest

from kipproducer._sender_lock import SenderFirstLock


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.0005)


def test_lock_contract():
    lock = SenderFirstLock()
    assert not lock.locked()
    assert lock.acquire() is True
    assert lock.locked()
    assert lock.acquire(blocking=False) is False  # not reentrant
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    assert lock.sender_waiting is False


def test_mutual_exclusion_across_threads():
    lock = SenderFirstLock()
    inside = []
    overlaps = []

    def worker(bind):
        if bind:
            lock.bind_sender()
        for _ in range(2000):
            with lock:
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(1)
                inside.pop()

    threads = [threading.Thread(target=worker, args=(i == 0,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []


def test_others_give_way_while_the_sender_waits():
    """The rule: while the sender thread waits for the lock, another thread does not take it,
    even when it is free at that moment (threading.Lock would let the releasing thread take
    it straight back, for as long as it keeps appending)."""
    lock = SenderFirstLock()
    order = []
    lock.acquire()  # the caller's thread holds the lock, as during a slice of appends

    def sender():
        lock.bind_sender()
        with lock:
            order.append("sender")

    thread = threading.Thread(target=sender)
    thread.start()
    wait_until(lambda: lock.sender_waiting)
    lock.release()
    # Free now, or already the sender's: either way not ours while the sender is first.
    assert lock.acquire(blocking=False) is False
    thread.join(10)
    assert order == ["sender"]
    assert lock.sender_waiting is False
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_the_sender_itself_does_not_give_way():
    lock = SenderFirstLock()
    lock.bind_sender()
    assert lock.acquire(blocking=False) is True
    lock.release()
    held = threading.Event()
    release = threading.Event()

    def other():
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    held.wait(10)
    assert lock.acquire(blocking=False) is False  # taken by the other thread: no waiting flag
    assert lock.sender_waiting is False
    release.set()
    thread.join(10)
    with lock:
        pass
