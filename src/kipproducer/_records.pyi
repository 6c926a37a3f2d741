# Stub of src/_accel/records.pyx, compiled into kipproducer._records: it sits here, beside
# the compiled module, because the module lives in the kipproducer package (a stub beside
# the .pyx would not be found). tests/test_stubs.py checks the two say the same.
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from typing_extensions import Buffer

Headers = Sequence[tuple[str | bytes, bytes | str | None]] | Mapping[str, bytes | str | None]
RecordTuple = tuple[bytes | str | Buffer | None, bytes | str | Buffer | None, Headers | None,
                    int | None]

BATCH_HEADER_SIZE_: int
LOG_OVERHEAD_: int
LAYOUT: dict[str, int]
CODEC_NAMES: dict[int, str | None]

class Record:
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]: ...

class Batch:
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    size_in_bytes: int
    position: int
    @property
    def last_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def last_sequence(self) -> int: ...
    @property
    def compression(self) -> str | None: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def has_delete_horizon(self) -> bool: ...
    @property
    def raw(self) -> memoryview: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Record]: ...
    def records(self) -> list[Record]: ...
    def deliver(self, start: int, end: int, base_offset: int, topic: str, partition: int,
                error: Any, callback: Any, message_type: Any, timestamp_type: int) -> int: ...

def encode_batch(
    records: Sequence[RecordTuple],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    compression: str | None = None,
    partition_leader_epoch: int = -1,
) -> bytes: ...
def decode_batches(
    data: Buffer, *, validate: bool = True, strict: bool = True, allow_partial: bool = False
) -> Iterator[Batch]: ...
def validate_batch(data: Buffer, *, strict: bool = True) -> Batch: ...
def rebuild_batch(batch: Batch, records: Iterable[Record]) -> bytes: ...
class UnitRuleError(ValueError): ...

def split_unit(data: Buffer, mode: int) -> list[Batch]: ...
def unit_summary(batches: list[Batch]) -> tuple[int, int, int, bool]: ...
def place_unit(data: Buffer, batches: list[Batch], first_offset: int,
               leader_epoch: int) -> tuple[int, int, int]: ...
def null_key_indexes(batch: Batch) -> list[int]: ...
def set_base_offset(buf: Buffer, base_offset: int, pos: int = 0) -> None: ...
def set_partition_leader_epoch(buf: Buffer, epoch: int, pos: int = 0) -> None: ...
def next_sequence(sequence: int, increment: int) -> int: ...
def _make_record(offset: int, timestamp: int, key: Any, value: Any, headers: Any) -> Record: ...
# Delivery-report Messages filled in place (kipproducer.message_layout configures them).
def configure_message_fill(
    message_type: type | None,
    offsets: dict[str, int] | None,
    template: bytes | None,
    partition_unset: int = -1,
    offset_unset: int = -1,
) -> None: ...
def message_fill_type() -> type | None: ...
def fill_message(
    topic: Any, partition: int, offset: int, key: Any, value: Any, headers: Any, error: Any,
    tstype: int, timestamp: int,
) -> Any: ...
def plain_run(
    data: bytes | bytearray | memoryview, pos: int, stop_at_transactional: bool
) -> tuple[int, int, int, int, int]:
    """kip mirror: the run of plain batches from ``pos`` (end, batches, records, next offset,
    last max timestamp)."""
def receive_buffer(size: int) -> bytearray:
    """A bytearray of ``size`` bytes, content unset (not zero-filled)."""
def extend_receive_buffer(buf: bytearray, size: int) -> None:
    """Grow ``buf`` in place to ``size`` bytes, the new ones unset; BufferError while viewed."""
