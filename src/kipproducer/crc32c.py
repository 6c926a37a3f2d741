"""CRC-32C (Castagnoli) as RecordBatch v2 uses it.

``crc32c(data, crc=0)`` uses the CPU's CRC instruction (x86 SSE4.2, ARMv8 CRC) when present and
a portable table-driven implementation otherwise; ``IMPLEMENTATION`` says which was chosen.
Both are exposed for tests: ``crc32c_software`` and ``crc32c_hardware``.
"""

from __future__ import annotations

from ._crc32c import (
    IMPLEMENTATION,
    crc32c,
    crc32c_combine,
    crc32c_hardware,
    crc32c_software,
    hardware_available,
)

__all__ = [
    "IMPLEMENTATION",
    "crc32c",
    "crc32c_combine",
    "crc32c_hardware",
    "crc32c_software",
    "hardware_available",
]
