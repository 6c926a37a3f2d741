"""Helpers for the emulated-mode tests (tests/kip/test_emulated_*.py): the stand-in for stock
Kafka (``kip.extensions.enable=false``), an emulated producer, and readers at both isolation
levels."""

from __future__ import annotations

import time
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
