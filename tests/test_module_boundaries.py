"""The package's module boundaries, read from the source with ``ast`` (no import needed):

* no module reads another object's underscored attribute (``other._x``, or
  ``getattr(other, "_x")``) unless the object is of its own module's making, except the pairs
  still listed in ``PRIVATE_READS_LEFT`` (issue 23's remaining work: each entry goes when its
  interface is made public, and the test fails if an entry is no longer needed, so the list
  only shrinks);
* the dependency between modules that issue 23 untangled runs one way (``ONE_WAY``).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "kipproducer"

# Names that look private but are a library's public constants.
PUBLIC_UNDERSCORED = {"KafkaError"}

# module (relative to src/kipproducer) -> the underscored attributes it still reads of objects
# made elsewhere. Remaining work of issue 23; do not add to it.
PRIVATE_READS_LEFT = {
    "producer.py": {"group._require", "group._check_owned"},
    "producer_group.py": {"self.producer._txn", "producer._txn", "producer._commit_txn_only"},
}

# (importer, imported) pairs where only the second may import the first.
ONE_WAY = [
    ("mirror/writers.py", "mirror/core.py"),  # core runs writers; writers see a MirrorView
    # the engine owns the transaction manager; the manager gets EngineHooks, imports no engine
    ("engine/transactions.py", "engine/engine.py"),
    ("engine/txn_requests.py", "engine/engine.py"),
    ("engine/txn_state.py", "engine/transactions.py"),
]


def _module_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _own_classes(tree: ast.Module) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _private_reads(path: Path) -> set[str]:
    """``x._name`` where x is not self/cls or a class of this module, and getattr(x, "_name")."""
    tree = ast.parse(path.read_text())
    own = _own_classes(tree) | {"self", "cls"} | PUBLIC_UNDERSCORED
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if not name.startswith("_") or name.startswith("__"):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in own:
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                    and base.func.id == "super":
                continue
            found.add(ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            target, attr = node.args[0], node.args[1]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str) \
                    and attr.value.startswith("_") and not attr.value.startswith("__") \
                    and not (isinstance(target, ast.Name) and target.id in ("self", "cls")):
                found.add(f"{ast.unparse(target)}.{attr.value}")
    return found


def _same_module_objects(path: Path, reads: set[str]) -> set[str]:
    """Reads of objects that the module itself defines the class of: ``conn._fail`` inside
    connection.py where ``conn`` is a Connection. Recognised by the attribute being defined
    (assigned on self, or a def) in the same file."""
    tree = ast.parse(path.read_text())
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id == "self":
            defined.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    defined.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    defined.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return {r for r in reads if r.rsplit(".", 1)[1] in defined}


def test_no_module_reads_another_modules_private_attributes():
    unexpected = {}
    still_listed = {}
    for path in _module_files():
        rel = path.relative_to(PACKAGE).as_posix()
        reads = _private_reads(path)
        reads -= _same_module_objects(path, reads)
        allowed = PRIVATE_READS_LEFT.get(rel, set())
        if reads - allowed:
            unexpected[rel] = sorted(reads - allowed)
        if allowed - reads:
            still_listed[rel] = sorted(allowed - reads)
    assert not unexpected, f"private attributes read across modules: {unexpected}"
    assert not still_listed, f"PRIVATE_READS_LEFT lists reads that are gone: {still_listed}"


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports anywhere (TYPE_CHECKING blocks and functions included), as
    paths relative to src/kipproducer."""
    package = path.relative_to(SRC).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[:len(package) - node.level + 1])
            module = base + (node.module.split(".") if node.module else [])
            candidates = [module] + [module + [a.name] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module.split(".")
            candidates = [module] + [module + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name.split(".") for a in node.names]
        else:
            continue
        for parts in candidates:
            if parts[:1] != ["kipproducer"]:
                continue
            rel = Path(*parts[1:]) if len(parts) > 1 else Path("__init__")
            for candidate in (rel.with_suffix(".py"), rel / "__init__.py"):
                if (PACKAGE / candidate).exists():
                    found.add(candidate.as_posix())
    return found


def test_one_way_dependencies():
    for importer, imported in ONE_WAY:
        assert imported not in _imports(PACKAGE / importer), (
            f"{importer} imports {imported}; the dependency runs the other way")
        assert importer in _imports(PACKAGE / imported), (
            f"{imported} no longer imports {importer}: update ONE_WAY")


def test_the_checks_see_what_they_look_for():
    """The readers above find what they are meant to (so the tests can fail)."""
    writers = PACKAGE / "mirror" / "writers.py"
    assert "producer.py" in _imports(writers)
    group = PACKAGE / "producer_group.py"
    assert "producer._commit_txn_only" in _private_reads(group)
