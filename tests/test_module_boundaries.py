"""The package's module boundaries, read from the source with ``ast`` (no import needed):

* no module reads another object's underscored attribute (``other._x``, or
  ``getattr(other, "_x")``) unless the object is of its own module's making, except the pairs
  still listed in ``PRIVATE_READS_LEFT`` (issue 23's remaining work: each entry goes when its
  interface is made public, and the test fails if an entry is no longer needed, so the list
  only shrinks);
* no module imports another module's underscored name (``from .x import _helper``), except
  the package's own private submodules (compiled ones such as ``_accumulator``) and the
  imports still listed in ``PRIVATE_IMPORTS_LEFT`` (shrink-only, like the reads);
* the dependency between modules that issue 23 untangled runs one way (``ONE_WAY``);
* no modules import each other in a circle, directly or through others (issue 46), counting
  every import: at the top, inside a function (a lazy one) or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "kipproducer"

# Names that look private but are a library's public constants.
PUBLIC_UNDERSCORED = {"KafkaError"}

# module (relative to src/kipproducer) -> the underscored attributes it still reads of objects
# made elsewhere. Remaining work of issue 23; do not add to it.
PRIVATE_READS_LEFT: dict[str, set[str]] = {}

# module -> the underscored names it still imports from other modules ("module.name").
# Remaining work of issue 23 in modules other sessions own; do not add to it.
PRIVATE_IMPORTS_LEFT: dict[str, set[str]] = {}

# (importer, imported) pairs where only the second may import the first.
ONE_WAY = [
    ("mirror/writers.py", "mirror/core.py"),  # core runs writers; writers see a MirrorView
    # the producer builds its group and hands it MemberTransactions; the group sees the
    # producer as a GroupProducer
    ("producer_group.py", "producer.py"),
    # the engine owns the transaction manager; the manager gets EngineHooks, imports no engine
    ("engine/transactions.py", "engine/engine.py"),
    ("engine/txn_requests.py", "engine/engine.py"),
    ("engine/txn_state.py", "engine/transactions.py"),
    # the engine keeps a PartitionSendState per partition; the state imports no engine
    ("engine/partition_send.py", "engine/engine.py"),
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


def _check_shrink_only(found: Callable[[Path], set[str]], left: dict[str, set[str]],
                       table: str, what: str) -> None:
    """Every module's findings are listed in ``left`` (the remaining work), and every listed
    one is still found (so the table only shrinks)."""
    unexpected = {}
    still_listed = {}
    for path in _module_files():
        rel = path.relative_to(PACKAGE).as_posix()
        got = found(path)
        allowed = left.get(rel, set())
        if got - allowed:
            unexpected[rel] = sorted(got - allowed)
        if allowed - got:
            still_listed[rel] = sorted(allowed - got)
    assert not unexpected, f"{what} across modules: {unexpected}"
    assert not still_listed, f"{table} lists entries that are gone: {still_listed}"


def test_no_module_reads_another_modules_private_attributes():
    def reads(path: Path) -> set[str]:
        found = _private_reads(path)
        return found - _same_module_objects(path, found)

    _check_shrink_only(reads, PRIVATE_READS_LEFT, "PRIVATE_READS_LEFT",
                       "private attributes read")


def _from_module(node: ast.ImportFrom, package: tuple[str, ...]) -> list[str]:
    """The dotted parts of the module a ``from ... import`` names (relative ones resolved
    against ``package``)."""
    module = node.module.split(".") if node.module else []
    if node.level:
        return list(package[:len(package) - node.level + 1]) + module
    return module


def _module_path(parts: list[str]) -> str | None:
    """src/kipproducer-relative path of module ``kipproducer.<parts>`` (None: not a source
    module of the package)."""
    rel = Path(*parts) if parts else Path("__init__")
    for candidate in (rel.with_suffix(".py"), rel / "__init__.py", rel.with_suffix(".pyi")):
        if (PACKAGE / candidate).exists():
            return candidate.as_posix()
    return None


def _imports(path: Path, package: tuple[str, ...] | None = None) -> set[str]:
    """The modules ``path`` imports anywhere (TYPE_CHECKING blocks and functions included), as
    paths relative to src/kipproducer; ``package``: the one the file is in (default: where it
    lies under src). ``from pkg import name`` imports ``pkg/name`` when that is a module (a
    submodule, compiled ones included), else ``pkg`` itself; a package's ``__init__`` that
    Python runs on the way to a submodule is not counted (what the importer uses is the
    submodule, and a package that re-exports its submodules would otherwise be a circle with
    each of them)."""
    package = package or path.relative_to(SRC).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            if module[:1] != ["kipproducer"]:
                continue
            for alias in node.names:
                target = _module_path(module[1:] + [alias.name]) or _module_path(module[1:])
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                target = _module_path(parts[1:]) if parts[0] == "kipproducer" else None
                if target is not None:
                    found.add(target)
    return found


def test_one_way_dependencies():
    for importer, imported in ONE_WAY:
        assert imported not in _imports(PACKAGE / importer), (
            f"{importer} imports {imported}; the dependency runs the other way")
        assert importer in _imports(PACKAGE / imported), (
            f"{imported} no longer imports {importer}: update ONE_WAY")


def _private_imports(path: Path, package: tuple[str, ...] | None = None) -> set[str]:
    """``from kipproducer.x import _name`` (relative forms too) as ``"x.py._name"``, unless
    ``_name`` is a submodule: a package's private modules (the compiled ones) are its own."""
    package = package or path.relative_to(SRC).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            if module[:1] != ["kipproducer"]:
                continue
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__"):
                    continue
                if _module_path(module[1:] + [name]) is not None:
                    continue  # a private submodule, imported by its own package
                found.add(f"{_module_path(module[1:])}.{name}")
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a circle (the strongly connected
    components of more than one module, or a module importing itself), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1 or module in graph.get(module, ()):
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _import_graph() -> dict[str, set[str]]:
    return {path.relative_to(PACKAGE).as_posix(): _imports(path) for path in _module_files()}


def test_no_import_circles():
    graph = _import_graph()
    circles = _circles(graph)
    assert not circles, "modules that import each other in a circle: " + "; ".join(
        " <-> ".join(group) for group in circles)


def test_no_module_imports_another_modules_private_names():
    _check_shrink_only(_private_imports, PRIVATE_IMPORTS_LEFT, "PRIVATE_IMPORTS_LEFT",
                       "private names imported")


def test_the_checks_see_what_they_look_for(tmp_path):
    """The readers above find what they are meant to (so the tests can fail)."""
    writers = PACKAGE / "mirror" / "writers.py"
    assert "producer.py" in _imports(writers)
    assert "producer_group.py" in _imports(PACKAGE / "producer.py")
    # A module that reads and imports what it should not, as if in src/kipproducer/mirror.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import _accumulator\n"
        "from ..producer import Producer, _timeout_arg\n"
        "from kipproducer.engine.config import _oauth_settings\n"
        "from . import core, writers as w\n"
        "if TYPE_CHECKING:\n"
        "    from ..producer_group import ProducerGroup\n"
        "def f(producer, group):\n"
        "    from ..stock import hooks\n"
        "    getattr(group, '_holding')\n"
        "    return producer._commit_txn_only(), self._own\n")
    mirror = ("kipproducer", "mirror")
    assert _private_reads(probe) == {"producer._commit_txn_only", "group._holding"}
    assert _private_imports(probe, mirror) == {"producer.py._timeout_arg",
                                               "engine/config.py._oauth_settings"}
    assert _imports(probe, mirror) == {
        "producer.py", "producer_group.py", "engine/config.py", "_accumulator.pyi",
        "mirror/core.py", "mirror/writers.py", "stock/hooks.py"}
    # A circle through three modules and one of a module with itself are found; a chain is not.
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"a"}, "b": {"a"}}) == [["a"]]
    assert _circles({"a": {"b"}, "b": {"c"}}) == []
    # The package's graph holds the imports the circles were made of (so the test can fail).
    graph = _import_graph()
    assert "broker/handlers/__init__.py" in graph["broker/broker.py"]
    assert "broker/api.py" in graph["broker/handlers/produce.py"]
    assert "broker/view.py" in graph["broker/api.py"]  # under TYPE_CHECKING
