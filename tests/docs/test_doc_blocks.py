"""Every fenced code block of README.md, docs/*.md and bench/RESULTS.md runs as written, or is
marked, in the Markdown right before it, as covered elsewhere or as a template.

The markers are HTML comments (invisible on a rendered page) on the line before the fence:

- ``<!-- template: REASON -->``: not runnable as written (placeholders, output shown for
  reading, a fragment of a larger program, a cloud service); REASON says why.
- ``<!-- covered: tests/FILE.py::TEST -->``: run by that test (it must exist).
- ``<!-- output: WHAT -->``: the block is what the block right above it prints (stdout, line
  for line; ``...`` inside a line stands for any text: offsets, ids, times). That block must
  be one run here, and its output is checked against this one.

Any other ``python`` block runs here in a fresh interpreter, in an empty working directory, with
two reference brokers of its own: the only change made to the text is that the bootstrap
address ``127.0.0.1:9092`` becomes the first broker's address and ``127.0.0.1:9093`` the
second's (the addresses the docs use for "your broker" and "a second broker"). Any other
``sh`` block runs line by line the same way, ``kip`` being ``python -m kipproducer``. A block
that is neither marked nor of these two languages fails the test, as does an unknown marker.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from kipproducer.broker.embedded import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>[\w-]+)\s*:\s*(?P<text>.*?)\s*-->\s*$")
RUNNABLE = {"python", "sh"}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None  # "template" / "covered" / another word (an error)
    marker_text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def extract(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, fence = i, m["indent"], m["fence"]
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        mm = MARKER.match(lines[before]) if before >= 0 else None
        blocks.append(Block(str(page.relative_to(ROOT)), start + 1, m["lang"],
                            textwrap.dedent("\n".join(body)) + "\n",
                            mm["kind"] if mm else None, mm["text"] if mm else ""))
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in extract(page)]
RUN_HERE = [b for b in ALL_BLOCKS if b.marker is None and b.lang in RUNNABLE]
# block id -> the output block that follows it (``<!-- output: ... -->``)
EXPECTED = {before.id: after for before, after in itertools.pairwise(ALL_BLOCKS)
            if after.marker == "output" and after.page == before.page}


def output_pattern(expected: str) -> re.Pattern[str]:
    """Expected output as a regex: each line exactly, ``...`` standing for any text."""
    lines = expected.strip("\n").splitlines()
    return re.compile("\n".join(".*?".join(map(re.escape, line.rstrip().split("...")))
                                for line in lines))


def check_output(block: Block, stdout: str) -> None:
    output = EXPECTED.get(block.id)
    if output is None:
        return
    printed = "\n".join(line.rstrip() for line in stdout.strip("\n").splitlines())
    assert output_pattern(output.code).fullmatch(printed), (
        f"{block.id} printed, where {output.id} shows what it prints:\n{stdout}")


def test_the_pages_have_blocks() -> None:
    assert len(ALL_BLOCKS) >= 40, [b.id for b in ALL_BLOCKS]
    assert any(b.page == "README.md" for b in RUN_HERE)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_every_block_is_run_or_marked(block: Block) -> None:
    if block.marker is None:
        assert block.lang in RUNNABLE, (
            f"{block.id}: a ```{block.lang} block is not run by the docs test: mark it "
            "<!-- template: why --> or <!-- covered: tests/FILE.py::TEST -->")
    elif block.marker == "template":
        assert len(block.marker_text) >= 10, f"{block.id}: say why it is a template"
    elif block.marker == "output":
        before = [b for b in ALL_BLOCKS if EXPECTED.get(b.id) == block]
        assert before and before[0] in RUN_HERE and before[0].lang == "python", (
            f"{block.id}: an output block follows a python block run by the docs test")
    elif block.marker == "covered":
        path, _, test = block.marker_text.partition("::")
        source = (ROOT / path).read_text() if (ROOT / path).is_file() else ""
        assert re.search(rf"^(async )?def {re.escape(test)}\(", source, re.M), (
            f"{block.id}: {block.marker_text} is not a test")
    else:
        pytest.fail(f"{block.id}: unknown marker {block.marker!r} (template or covered)")


@pytest.fixture
def brokers():
    with EmbeddedBroker(config={"num.partitions": 3}) as first, \
            EmbeddedBroker(config={"num.partitions": 3}) as second:
        yield first.bootstrap_servers, second.bootstrap_servers


def localize(code: str, brokers: tuple[str, str]) -> str:
    return code.replace("127.0.0.1:9092", brokers[0]).replace("127.0.0.1:9093", brokers[1])


def run(args: list[str], cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("block", RUN_HERE, ids=lambda b: b.id)
def test_block_runs_as_written(block: Block, brokers, tmp_path: Path) -> None:
    code = localize(block.code, brokers)
    if block.lang == "python":
        done = run([sys.executable, "-c", code], tmp_path)
        assert done.returncode == 0, f"{block.id}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        check_output(block, done.stdout)
        return
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        assert words[0] in ("kip", "python"), f"{block.id}: the harness runs kip and python"
        args = ([sys.executable, "-m", "kipproducer"] if words[0] == "kip"
                else [sys.executable]) + words[1:]
        done = run(args, tmp_path)
        assert done.returncode == 0, (
            f"{block.id}: {line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def test_readme_shows_what_its_blocks_print() -> None:
    """Every python block of the README that prints is followed by what it prints."""
    printing = [b for b in RUN_HERE if b.page == "README.md" and b.lang == "python"
                and "print(" in b.code]
    assert printing and all(b.id in EXPECTED for b in printing), [
        b.id for b in printing if b.id not in EXPECTED]


def test_output_patterns() -> None:
    pattern = output_pattern("written: ledger 0 ...\nappended at 107\n")
    assert pattern.fullmatch("written: ledger 0 100\nappended at 107")
    assert not pattern.fullmatch("written: ledger 0 100\nappended at 108")
    assert not pattern.fullmatch("written: ledger 0 100")  # a line missing
    assert not pattern.fullmatch("failed: ledger 0 100\nappended at 107")


def test_the_pages_point_only_inside_the_repository() -> None:
    """Relative links resolve inside the checkout; no page names a path outside it."""
    for page in PAGES:
        text = page.read_text()
        outside = re.findall(r"(?<![\w.])(?:\.\./)*shared/\S*", text)
        assert not outside, f"{page.relative_to(ROOT)}: {outside}"
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if not re.match(r"[a-z]+:", target):
                path = (page.parent / target).resolve()
                assert path.is_relative_to(ROOT) and path.exists(), (
                    f"{page.relative_to(ROOT)}: {target}")
