"""Helpers for the emulated-mode tests (tests/kip/test_emulated_*.py): the stand-in for stock
Kafka (``kip.extensions.enable=false``), an emulated producer, and readers at both isolation
levels."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kip_support import create_topic, kip_producer, read_confluent, unique

from kipproducer.stock.plan import FILLER_HEADER

STANDIN_CONFIG = {"kip.extensions.enable": False}


def emulated_producer(bootstrap: str, writer_id: str | None = None, **extra: Any):
    config: dict[str, Any] = {"kip.mode": "emulated", **extra}
    if writer_id is not None:
        config["kip.emulation.transactional.id"] = writer_id
    return kip_producer(bootstrap, **config)


def new_topic(bootstrap: str, prefix: str, partitions: int = 1) -> str:
    return create_topic(bootstrap, unique(prefix), partitions)


def committed(bootstrap: str, topic: str, partitions: int = 1):
    return read_confluent(bootstrap, topic, partitions,
                          config={"isolation.level": "read_committed"})


def uncommitted(bootstrap: str, topic: str, partitions: int = 1):
    return read_confluent(bootstrap, topic, partitions,
                          config={"isolation.level": "read_uncommitted"})


def is_filler(rec) -> bool:
    return rec.value is None and rec.key == b"" and rec.headers == ((FILLER_HEADER, b""),)


def now_ms() -> int:
    return int(time.time() * 1000)


def race_conditional_writers(make_producer: Callable[[], Any], topic: str,
                             committed_values: Callable[[], list[tuple[int, bytes]]], *,
                             writers: int = 4, rounds: int = 5, k: int = 3) -> None:
    """``writers`` threads append ``k`` records at a time with expected_offset until each
    has ``rounds`` wins: at most one wins per expected offset, no interleaving, no
    duplicate; every committed record (``committed_values()``: (offset, value) in order)
    belongs to a success its writer saw, at the offsets it was told."""
    from kipproducer.errors import OffsetMismatchError

    start = threading.Barrier(writers)
    outcomes: dict[int, dict] = {}

    def writer(w: int) -> None:
        out: dict = {"successes": [], "mismatches": 0, "error": None}
        outcomes[w] = out
        try:
            with make_producer() as p:
                expected = 0
                start.wait(60)
                attempt = 0
                while len(out["successes"]) < rounds and attempt < 200:
                    values = [b"w%d-a%d-%d" % (w, attempt, i) for i in range(k)]
                    try:
                        first = p.append(topic, values, partition=0, expected_offset=expected)
                    except OffsetMismatchError as exc:
                        out["mismatches"] += 1
                        expected = exc.log_end_offset
                    else:
                        out["successes"].append((first, values))
                        expected = first + k + 1   # its commit marker takes one offset
                    attempt += 1
        except BaseException as exc:  # reported below
            out["error"] = repr(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert all(o["error"] is None for o in outcomes.values()), outcomes
    assert all(len(o["successes"]) == rounds for o in outcomes.values()), outcomes
    assert sum(o["mismatches"] for o in outcomes.values()) > 0  # they did race
    wins = sorted((first, values) for o in outcomes.values() for first, values in o["successes"])
    assert committed_values() == [(first + i, v) for first, values in wins
                                  for i, v in enumerate(values)]
    starts = [first for first, _ in wins]
    assert len(set(starts)) == len(starts)
