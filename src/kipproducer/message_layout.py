"""Delivery-report Messages built without confluent-kafka's constructor (issue 15).

A per-record delivery report is a ``confluent_kafka.Message``. Its constructor parses up to
eleven arguments with ``PyArg_ParseTupleAndKeywords`` (about 0.5 us per report, half of
produce_batch's client CPU per record), while confluent-kafka itself fills the C struct of the
Messages it reports. kipproducer does the same, but it does not compile against
confluent-kafka's header: it *finds* the layout of the installed version at import time.

The probe builds Messages with the constructor, with distinctive values (distinct topic, key,
value, headers and error objects, distinctive integers), and reads their memory:

- every field must be found at exactly one place (a pointer field holds its object's
  address; an integer field its value), at the same place in two probes with other values;
- fields must not overlap, and every byte outside them must be the same in both probes and in
  a Message built with no arguments (so the template copied for those bytes does not depend on
  the arguments), with no word there that looks like an object address (a reference the fill
  would copy without counting it);
- then the fill itself is checked: a filled Message's bytes equal the constructor's, every
  accessor answers the same, the objects' reference counts are back where they were once the
  Messages are gone.

Any mismatch (another confluent-kafka version with another layout, another Python) turns the
fill off and reports are built with the constructor, as before: slower, never wrong.
"""

from __future__ import annotations

import ctypes
import gc
import struct
import sys
from dataclasses import dataclass

# Fields the fill writes, with how they are stored: "ptr" an object reference (NULL for None),
# "i32"/"i64" a native integer.
POINTER_FIELDS = ("topic", "value", "key", "headers", "error")
INT_FIELDS = {"partition": "i", "offset": "q", "timestamp": "q", "tstype": "i",
              "leader_epoch": "i", "latency": "q"}
# Probes larger than this are not a Message layout we know how to reason about.
MAX_SIZE = 1024


@dataclass(frozen=True)
class MessageLayout:
    """Where each field lives (byte offsets from the object's start) and the bytes of a
    Message built with no arguments (the defaults of every other field)."""

    size: int
    head: int
    offsets: dict[str, int]
    template: bytes
    partition_unset: int
    offset_unset: int


class LayoutMismatch(Exception):
    """The installed Message does not have a layout the fill can trust."""


def _raw(obj: object, size: int) -> bytes:
    return ctypes.string_at(id(obj), size)


def _probe_values(tag: str, salt: int) -> dict:
    """Constructor arguments with values no other field (or the other probe) shares."""
    from confluent_kafka import KafkaError

    return {
        "topic": f"kip-layout-probe-topic-{tag}",
        "partition": 0x2A3B4C5D + salt,
        "offset": 0x1A2B3C4D5E6F + salt,
        "key": f"kip-layout-probe-key-{tag}".encode(),
        "value": f"kip-layout-probe-value-{tag}".encode(),
        "headers": [("kip-layout-probe", tag.encode())],
        "error": KafkaError(KafkaError._FAIL, f"kip layout probe {tag}"),
        "timestamp": (0x13572468 + salt, 0x0B1C2D3E4F5A + salt),
        # seconds; stored as microseconds (an exact integer for these values)
        "latency": 4660.0 + salt,
        "leader_epoch": 0x1D2E3F4A + salt,
    }


def _stored(values: dict) -> dict[str, tuple[str, int]]:
    """What each field of the struct should hold for these constructor arguments."""
    out = {name: ("ptr", id(values[name])) for name in POINTER_FIELDS}
    out["partition"] = ("i", values["partition"])
    out["offset"] = ("q", values["offset"])
    out["tstype"] = ("i", values["timestamp"][0])
    out["timestamp"] = ("q", values["timestamp"][1])
    out["leader_epoch"] = ("i", values["leader_epoch"])
    out["latency"] = ("q", int(values["latency"] * 1_000_000))
    return out


def _find(raw: bytes, head: int, kind: str, value: int) -> list[int]:
    fmt = "P" if kind == "ptr" else kind
    width = struct.calcsize(fmt)
    pattern = struct.pack("@" + fmt, value)
    return [at for at in range(head, len(raw) - width + 1, width)
            if raw[at:at + width] == pattern]


def _width(kind: str) -> int:
    return struct.calcsize("@" + ("P" if kind == "ptr" else kind))


def probe(message_type: type) -> MessageLayout:
    """The layout of ``message_type`` (confluent_kafka.Message), or LayoutMismatch."""
    size = getattr(message_type, "__basicsize__", 0)
    head = object.__basicsize__
    if not (head < size <= MAX_SIZE) or getattr(message_type, "__itemsize__", 1) != 0:
        raise LayoutMismatch(f"unexpected object size {size}")
    if getattr(message_type, "__dictoffset__", 1) or getattr(message_type,
                                                             "__weakrefoffset__", 1):
        raise LayoutMismatch("Message has a __dict__ or weak references")
    probes = [_probe_values("A", 0), _probe_values("B", 1)]
    messages = [message_type(**values) for values in probes]
    raws = [_raw(m, size) for m in messages]
    blank = message_type()
    template = _raw(blank, size)
    offsets: dict[str, int] = {}
    kinds: dict[str, str] = {}
    for name in (*POINTER_FIELDS, *INT_FIELDS):
        found = set()
        for values, raw in zip(probes, raws, strict=True):
            kind, value = _stored(values)[name]
            places = _find(raw, head, kind, value)
            if len(places) != 1:
                raise LayoutMismatch(f"field {name} found at {places}")
            found.add(places[0])
        if len(found) != 1:
            raise LayoutMismatch(f"field {name} moves between probes: {sorted(found)}")
        offsets[name] = found.pop()
        kinds[name] = _stored(probes[0])[name][0]
    covered = bytearray(size)
    for name, at in offsets.items():
        for i in range(at, at + _width(kinds[name])):
            if covered[i]:
                raise LayoutMismatch(f"field {name} overlaps another")
            covered[i] = 1
    for i in range(head, size):
        if not covered[i] and not raws[0][i] == raws[1][i] == template[i]:
            raise LayoutMismatch(f"byte {i} depends on the arguments but is no known field")
    # Words outside the fields come from the template: none may be an object reference.
    word = struct.calcsize("P")
    for at in range(head - head % word, size - word + 1, word):
        if any(covered[at:at + word]):
            continue
        (number,) = struct.unpack_from("@P", template, at)
        if number >= 1 << 16 and number % word == 0:
            raise LayoutMismatch(f"word at {at} of a blank Message looks like a reference")
    for name in POINTER_FIELDS:
        (pointer,) = struct.unpack_from("@P", template, offsets[name])
        if pointer:
            raise LayoutMismatch(f"a blank Message's {name} is not NULL")
    (partition_unset,) = struct.unpack_from("@i", template, offsets["partition"])
    (offset_unset,) = struct.unpack_from("@q", template, offsets["offset"])
    del messages, blank
    return MessageLayout(size, head, offsets, template, partition_unset, offset_unset)


def _accessors(message) -> tuple:
    return (message.topic(), message.partition(), message.offset(), message.key(),
            message.value(), message.headers(), message.error(), message.timestamp(),
            message.latency(), message.leader_epoch(), len(message))


def _verify(message_type: type, layout: MessageLayout) -> None:
    """The installed fill against the constructor, on both probe value sets."""
    from ._records import fill_message

    for tag, salt in (("A", 0), ("B", 1), ("C", 2)):
        values = _probe_values(tag, salt)
        if tag == "C":  # the unset values: None fields, negative partition and offset
            values.update(key=None, value=None, headers=None, error=None, partition=-1,
                          offset=-1)
        shared = [values[name] for name in POINTER_FIELDS if values[name] is not None]
        before = [sys.getrefcount(obj) for obj in shared]
        built = message_type(values["topic"], values["partition"], values["offset"],
                             values["key"], values["value"], values["headers"],
                             values["error"], values["timestamp"])
        filled = fill_message(values["topic"], values["partition"], values["offset"],
                              values["key"], values["value"], values["headers"],
                              values["error"], values["timestamp"][0], values["timestamp"][1])
        if type(filled) is not message_type:
            raise LayoutMismatch("the fill built another type")
        if _raw(filled, layout.size)[layout.head:] != _raw(built, layout.size)[layout.head:]:
            raise LayoutMismatch("a filled Message's bytes differ from the constructor's")
        if _accessors(filled) != _accessors(built) or filled != built:
            raise LayoutMismatch("a filled Message answers differently")
        if gc.is_tracked(filled) != gc.is_tracked(built):
            raise LayoutMismatch("a filled Message is not tracked as the constructor's is")
        del built, filled
        if [sys.getrefcount(obj) for obj in shared] != before:
            raise LayoutMismatch("reference counts moved")


def install(message_type: type | None = None) -> str | None:
    """Turn the fill on for ``message_type`` (default confluent_kafka.Message) when its
    layout probes consistent; returns None when on, else why it stays off."""
    from ._records import configure_message_fill

    if message_type is None:
        from confluent_kafka import Message as message_type
    configure_message_fill(None, None, None)
    try:
        layout = probe(message_type)
        configure_message_fill(message_type, layout.offsets, layout.template,
                               layout.partition_unset, layout.offset_unset)
        _verify(message_type, layout)
    except (LayoutMismatch, TypeError, ValueError, OverflowError) as exc:
        configure_message_fill(None, None, None)
        return f"{type(exc).__name__}: {exc}"
    return None


def disable() -> None:
    """Build every report with the constructor (the fallback; for tests and comparisons)."""
    from ._records import configure_message_fill

    configure_message_fill(None, None, None)
