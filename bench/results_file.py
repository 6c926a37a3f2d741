"""Shared by the side-by-side scripts: the machine line and bench/RESULTS.md sections."""

from __future__ import annotations

import os
import platform


def machine() -> str:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores, {cpu}, {platform.system()}"


def replace_section(path: str, heading: str, section: str) -> None:
    """Swap one '## ' section of a results file (up to the next '## ' line), keep the rest."""
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == heading), None)
    if start is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        tail = "".join(lines[end:])
        text = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    with open(path, "w") as f:
        f.write(text)



def broker_data_dir(prefix: str) -> tuple[str, str]:
    """A fresh data dir for a benchmark's broker, and a phrase saying where it lives.

    On tmpfs (/dev/shm) when there is one: every run writes ~130 MB, and the kernel's writeback
    of earlier runs to the disk would otherwise land, as CPU and I/O stalls, in later runs,
    whichever contender they belong to. The broker still writes every batch (to page cache,
    as with a disk and no fsync); only the disk behind it is left out.
    """
    import tempfile

    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return tempfile.mkdtemp(prefix=prefix, dir=shm), "on tmpfs (/dev/shm)"
    return tempfile.mkdtemp(prefix=prefix), "in the temp dir"
