# Stub of src/_accel/held_io.pyx, compiled into kipproducer._held_io: it sits here, beside
# the compiled module, because the module lives in the kipproducer package (a stub beside
# the .pyx would not be found). tests/test_stubs.py checks the two say the same.
from collections.abc import Iterable

from typing_extensions import Buffer

def send(fd: int, data: Buffer) -> int: ...
def recv_into(fd: int, buffer: Buffer, nbytes: int = 0) -> int: ...
def sendmsg(fd: int, buffers: Iterable[Buffer]) -> int: ...
