"""Attributes of the engine and the Producer kept in the typed state objects the C produce()
path reads (src/_accel/kipproducer/_accumulator.pxd): the Python side keeps its attribute
names, each a property over one field of the holder."""

from __future__ import annotations

import operator
from typing import Any


def state_field(holder: str, name: str, *, writable: bool = True) -> property:
    """A property reading (and, when ``writable``, setting) ``self.<holder>.<name>``."""
    get = operator.attrgetter(f"{holder}.{name}")  # (a C getter: no Python frame per read)
    if not writable:
        return property(get)

    def set_field(owner: Any, value: Any) -> None:
        setattr(getattr(owner, holder), name, value)

    return property(get, set_field)
