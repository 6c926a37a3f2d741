"""One table of API keys and one of error codes, both the protocol layer's: the constants match
kio's index, and no other module of the package defines its own copy (a name of either table
bound to an int literal at module level)."""

from __future__ import annotations

import ast
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from kipproducer.protocol import api_keys, error_codes

PACKAGE = Path(api_keys.__file__).resolve().parent.parent
API_NAMES = {name.upper() for name in api_key_map.values()}
# (NONE is too common a name to claim: compression.py's codec 0 is NONE too)
ERROR_NAMES = ({member.name.upper() for member in ErrorCode} - {"NONE"}) | {
    "INVALID_PRODUCE_OFFSET", "OFFSET_MISMATCH"}
# where each table lives (kipproducer/errors.py holds the two codes of docs/protocol.md §5,
# which the client's exceptions need; error_codes imports them from there)
HOMES = {"protocol/api_keys.py", "protocol/error_codes.py", "errors.py"}


def test_every_api_key_matches_kio():
    constants = {n: v for n, v in vars(api_keys).items() if n.isupper() and isinstance(v, int)}
    assert constants == {name.upper(): key for key, name in api_key_map.items()}


def test_every_kafka_error_code_is_spelled_out():
    for member in ErrorCode:
        assert getattr(error_codes, member.name.upper()) == int(member.value), member.name


def _int_bindings(path: Path) -> list[tuple[str, int]]:
    """Module-level ``NAME = 3`` / ``A, B = 1, 2`` / ``NAME: Final = 3`` bindings."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = []
                if isinstance(target, ast.Name):
                    pairs = [(target, node.value)]
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                for name, value in pairs:
                    if isinstance(name, ast.Name) and isinstance(value, ast.Constant) \
                            and isinstance(value.value, int):
                        found.append((name.id, node.lineno))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            found.append((node.target.id, node.lineno))
    return found


def test_no_module_keeps_its_own_copy():
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in HOMES:
            continue
        for name, line in _int_bindings(path):
            if name in API_NAMES or name in ERROR_NAMES:
                copies.append(f"{rel}:{line}: {name}")
    assert not copies, "import these from kipproducer.protocol.api_keys / error_codes: " + \
        ", ".join(copies)


def test_the_scan_finds_a_copy(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("FETCH, LIST_OFFSETS = 1, 2\nNOT_COORDINATOR: int = 16\nOTHER = 5\n")
    assert [n for n, _ in _int_bindings(sample)] == ["FETCH", "LIST_OFFSETS",
                                                     "NOT_COORDINATOR", "OTHER"]
