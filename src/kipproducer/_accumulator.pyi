# Stub of src/_accel/accumulator.pyx, compiled into kipproducer._accumulator: it sits here, beside
# the compiled module, because the module lives in the kipproducer package (a stub beside
# the .pyx would not be found). tests/test_stubs.py checks the two say the same.
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._records import Headers

CODEC_NAMES: dict[int, str | None]
FIELD_NAMES: tuple[str, ...]

def monotonic_ms() -> int: ...

class HeaderWire:
    @property
    def hits(self) -> int: ...

class ProducerBatch:
    topic: str
    partition: int
    base_offset: int
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    offsets_explicit: bool
    produce_mode: int
    transactional: bool
    created_ms: int
    first_timestamp: int
    max_timestamp: int
    opaque_runs: list[tuple[int, Any]] | None
    extra_attributes: int
    key_conditions: list[tuple[int, int, bytes]] | None
    key_partition_count: int
    @property
    def opaques(self) -> list[Any] | None: ...
    finished: bool
    attempts: int
    runs: list[tuple[int, int, int, int, int]] | None
    run_count: int
    def record_offset(self, index: int) -> int: ...
    @property
    def data(self) -> memoryview: ...
    @property
    def size(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def last_sequence(self) -> int: ...
    @property
    def compression(self) -> str | None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class PartitionState:
    topic: str
    partition: int
    last_offset: int
    next_sequence: int
    @property
    def open_records(self) -> int: ...
    @property
    def ready_batches(self) -> int: ...

Column = Any  # pyarrow binary array, (data, offsets) tuple, or sequence of bytes | None

class RecordAccumulator:
    batch_size: int
    batch_num_messages: int
    linger_ms: int
    max_bytes: int
    max_messages: int
    codec: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    buffered_bytes: int
    buffered_messages: int
    closed_batches: int
    pack_runs: bool
    def __init__(
        self,
        *,
        batch_size: int = 1000000,
        batch_num_messages: int = 10000,
        linger_ms: float = 5,
        max_bytes: int = 1073741824,
        max_messages: int = 100000,
        compression: str | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None: ...
    def set_producer(self, producer_id: int, producer_epoch: int) -> None: ...
    def partition_state(self, topic: str, partition: int) -> PartitionState: ...
    @property
    def headers_reused(self) -> int: ...
    def close_open(self, topic: str, partition: int) -> None: ...
    def set_next_sequence(self, topic: str, partition: int, sequence: int) -> None: ...
    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | str | None,
        value: bytes | str | None,
        headers: Headers | None = None,
        timestamp: int | None = None,
        offset: int | None = None,
        opaque: Any = None,
        expected_offset: int | None = None,
        expected_key_offset: int | None = None,
        partition_count: int = -1,
    ) -> None: ...
    def append_arrays(
        self,
        topic: str,
        partition: int | npt.NDArray[np.int32],
        values: Column,
        keys: Column | None = None,
        timestamps: npt.ArrayLike | None = None,
        offsets: npt.ArrayLike | None = None,
        headers: Headers | Sequence[Headers | None] | None = None,
        opaque: Any = None,
        expected_offset: int | None = None,
    ) -> int: ...
    def append_dicts(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        start: int,
        stop: int,
        chosen: int | npt.NDArray[np.int32] | None,
        call_partition: int,
        max_bytes: int,
        default_target: Any,
        make_target: Any,
        kip_refusals: tuple[Any, Any],
        fail: Any,
    ) -> int:
        """confluent-kafka's produce_batch per record: ``messages[start:stop]``; returns how
        many records were appended."""
    def append_fetched(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        max_timestamp: int,
        log_append_time: bool = False,
        with_offsets: bool = False,
        min_offset: int = -1,
        start_record: int = 0,
        start_pos: int = 0,
        opaque: Any = None,
    ) -> tuple[int, int, int, int]:
        """The records of one fetched RecordBatch v2 (its uncompressed records section),
        copied without decoding (kip mirror); returns (records done, byte position, records
        queued, last queued source offset or -1)."""
    def append_fetched_batches(
        self,
        topic: str,
        partition: int,
        span: bytes | bytearray | memoryview,
        with_offsets: bool = False,
        min_offset: int = -1,
        batch_pos: int = 0,
        start_record: int = 0,
        start_pos: int = 0,
        opaque: Any = None,
    ) -> tuple[bool, int, int, int, int, int]:
        """append_fetched for whole uncompressed CreateTime batches back to back; returns
        (done, batch position, record index, record position, records queued, last queued
        source offset or -1)."""
    def drain(
        self,
        now_ms: int | None = None,
        *,
        flush: bool = False,
        partitions: Collection[tuple[str, int]] | None = None,
    ) -> list[ProducerBatch]: ...
    def reenqueue(self, batch: ProducerBatch) -> None: ...
    def release(self, batch: ProducerBatch) -> None: ...
    def next_ready_ms(self, now_ms: int | None = None) -> int | None: ...
    def purge(self) -> list[ProducerBatch]: ...
    def __len__(self) -> int: ...

def key_hashes(keys: Column, algorithm: str) -> npt.NDArray[np.uint32]: ...
def key_lengths(keys: Column) -> npt.NDArray[np.int64]: ...
def largest_record(values: Column, keys: Column | None = None) -> tuple[int, int, int]: ...
def scan_messages(messages: list[Any], call_partition: int,
                  conditioned: list[int] | None = None) -> bool: ...
def message_keys(messages: list[Any]) -> list[Any]: ...
def check_key_condition(key: Any, offset: int | None, expected_offset: int | None,
                        expected_key_offset: int) -> None: ...
def has_kip_keys(messages: list[Any]) -> bool: ...

class BatchDelivery:
    """One Kafka batch's delivery outcome (produce_arrays' default report)."""

    count: int
    def __init__(self, topic: str, partition: int, offset: int, count: int,
                 error: Any) -> None: ...
    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def error(self) -> Any: ...
    def __len__(self) -> int: ...

def report_runs(batch: ProducerBatch, start: int, end: int, placed: bool, error: Any,
                callback: Any) -> int: ...

# The C boundary (src/_accel/kipproducer/_accumulator.pxd): the state the per-record
# produce() and note_appended() read as typed fields. An Engine holds an EngineState
# (Engine.shared), a Producer a ProduceState (its _kip_state slot).
class EngineState:
    acc: RecordAccumulator
    lock: Any
    reports_cv: Any
    message_max_bytes: int
    wake: Callable[[], None]
    fail_held: Callable[[], None]
    outstanding: int
    dead: bool
    sender_idle: bool
    idle_closed: int
    idle_until_ms: int
    def __init__(self, acc: RecordAccumulator, lock: Any, reports_cv: Any,
                 message_max_bytes: int, wake: Callable[[], None],
                 fail_held: Callable[[], None]) -> None: ...

class ReportTarget:
    callback: Any
    per_record: bool
    def __init__(self, callback: Any, per_record: bool) -> None: ...

class ProduceState:
    group: Any
    engine: Any
    sender: EngineState | None
    txn: Any
    kip_direct: bool
    lanes: dict[str, list]
    last_target: ReportTarget | None
    default_on_delivery: Any
    def use_engine(self, engine: Any, sender: EngineState | None) -> None: ...

# Per-record produce() in C (issue 15); kipproducer.producer wires it and makes it
# Producer.produce.
def configure_produce(general: Any, librdkafka_produce: Any, engine_lane: str,
                      keywords: Collection[str], state_slot: Any = None) -> None: ...
def produce(self: Any, topic: Any, value: Any = None, key: Any = None, *args: Any,
            **kwargs: Any) -> Any: ...
def note_appended(shared: EngineState, count: int) -> bool: ...
