"""Every benchmark command the documentation gives (an inline code span that runs a
bench/side_by_side_*.py script, in README.md, docs/*.md or bench/RESULTS.md) is accepted as
written: the script's own argument parser takes every flag and value of it.

Running them all as written takes hours (1M records, several rounds each), so this test stops
each script right after its parser returns. The scripts' work itself is run by
test_bench_smoke.py at a small size."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]
# An inline code span; it may be folded over a line break in the Markdown source.
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")

# Runs the script as __main__ with the command's arguments, and stops it with the namespace its
# parser returned (printed as JSON), so nothing after the parsing runs.
PARSE_ONLY = r"""
import argparse, json, runpy, sys
script, args = sys.argv[1], sys.argv[2:]
class Parsed(BaseException):
    pass
real = argparse.ArgumentParser.parse_args
def parse_args(self, args=None, namespace=None):
    raise Parsed(real(self, args, namespace))
argparse.ArgumentParser.parse_args = parse_args
sys.argv = [script, *args]
sys.path.insert(0, __import__("os").path.dirname(script))
try:
    runpy.run_path(script, run_name="__main__")
except Parsed as parsed:
    print(json.dumps(vars(parsed.args[0]), default=str))
    raise SystemExit(0)
raise SystemExit("the script ended without parsing its arguments")
"""


def bench_commands() -> list[tuple[str, str]]:
    """(where, command) for every benchmark command of the docs, whitespace folded."""
    found: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in SPAN.finditer(text):
            command = " ".join(match.group(1).split())
            if "side_by_side_" not in command or not re.match(r"(cd bench && )?python ", command):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.setdefault(command, f"{page.relative_to(ROOT)}:{line}")
    return sorted((where, command) for command, where in found.items())


def split(command: str) -> tuple[Path, list[str]]:
    """The script and its arguments; ``cd bench && python X.py`` runs bench/X.py."""
    cwd = ROOT
    if command.startswith("cd bench && "):
        cwd, command = ROOT / "bench", command.removeprefix("cd bench && ")
    words = shlex.split(command)
    assert words[0] == "python", command
    return (cwd / words[1]).resolve(), words[2:]


COMMANDS = bench_commands()


def test_the_docs_give_benchmark_commands() -> None:
    # The scan itself must find what is there (a broken pattern would pass every case below
    # by finding nothing).
    scripts = {split(command)[0].name for _, command in COMMANDS}
    assert {"side_by_side_producer.py", "side_by_side_copy.py", "side_by_side_tls.py",
            "side_by_side_stock.py", "side_by_side_mirror.py"} <= scripts, scripts


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_benchmark_command_is_accepted_as_written(where: str, command: str) -> None:
    script, args = split(command)
    assert script.is_file(), f"{where}: {command}: no script {script}"
    proc = subprocess.run([sys.executable, "-c", PARSE_ONLY, str(script), *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, f"{where}: {command}:\n{proc.stderr[-2000:]}"
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    for flag in (a for a in args if a.startswith("--")):
        assert flag[2:].replace("-", "_") in parsed or flag == "--no-callbacks", (where, flag)
