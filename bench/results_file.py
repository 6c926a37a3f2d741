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


