"""The `kip` command line itself: every option explains itself, `--version` answers, and a
tool that cannot reach its broker says which address it tried."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from importlib.metadata import version

import pytest

from kipproducer.cli import build_parser


def _options_without_help(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _options_without_help(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_subcommand_has_help_text() -> None:
    assert _options_without_help(build_parser(), "kip") == []


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run([sys.executable, "-m", "kipproducer", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"kip {version('kipproducer')}"


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv", [["groups", "list"], ["transactions", "list"]])
def test_unreachable_broker_is_one_line_naming_the_address(argv: list[str]) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    done = subprocess.run([sys.executable, "-m", "kipproducer", argv[0], "--bootstrap-server",
                           address, *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"kip {argv[0]}: cannot reach {address}"), lines[0]
