"""The repository explains itself: nothing in src/, docs/ or README.md points to files outside
it, and every "docs/protocol.md §N" a comment or page cites is a numbered section there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = re.compile(r"\.\./shared|shared/(?:KIP-WIRE|reference)|KIP-WIRE(?:\.md| §)")
CITED = re.compile(r"docs/protocol\.md §(\d+)((?:, ?§\d+)*)")


def tracked(*where: str) -> list[Path]:
    names = subprocess.run(["git", "ls-files", *where], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return [ROOT / name for name in names]


def test_nothing_points_outside_the_repository() -> None:
    found = []
    for path in tracked("src", "docs", "README.md"):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_every_cited_protocol_section_exists() -> None:
    page = (ROOT / "docs" / "protocol.md").read_text()
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", page, re.M)}
    assert sections == set(range(1, max(sections) + 1))
    cited: dict[int, str] = {}
    for path in tracked("src", "docs", "README.md"):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for first, more in CITED.findall(line):
                for n in [first, *re.findall(r"\d+", more)]:
                    cited.setdefault(int(n), f"{path.relative_to(ROOT)}:{number}")
    assert cited, "no citation found: the pattern is wrong"
    assert {n: where for n, where in cited.items() if n not in sections} == {}
