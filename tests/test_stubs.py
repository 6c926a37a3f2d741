"""The .pyi stubs of the compiled modules (src/kipproducer/_*.pyi, shipped with py.typed) say
what the modules have: every public name of a module is in its stub and every name of the
stub is in the module; the same for the public methods and attributes of each class; and
where inspect reads a function's signature, the stub's parameters (names, kinds, which have
defaults, literal default values) are the same."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import types
from pathlib import Path

import pytest

import kipproducer

PACKAGE = Path(kipproducer.__file__).resolve().parent
COMPILED = ["_accumulator", "_arrow_rows", "_crc32c", "_held_io", "_produce_wire", "_records",
            "_sender_lock", "_tls_server"]

_KINDS = {
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
}


class Stub:
    """What one stub file declares: names at module level, and per class its members (a
    function is a method; a property or an annotation an attribute)."""

    def __init__(self, path: Path) -> None:
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.names: dict[str, ast.AST] = {}
        self.classes: dict[str, dict[str, ast.AST]] = {}
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                self.names[node.name] = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self.names[node.target.id] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.names[target.id] = node
            if isinstance(node, ast.ClassDef):
                members: dict[str, ast.AST] = {}
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        members[item.name] = item
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        members[item.target.id] = item
                self.classes[node.name] = members

    def aliases(self) -> set[str]:
        """Type aliases the stub defines for itself (``Column = Any``): not in the module."""
        return {name for name, node in self.names.items()
                if isinstance(node, ast.Assign)}


def _stub(name: str) -> Stub:
    return Stub(PACKAGE / f"{name}.pyi")


def _is_property(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def _module_public(module: types.ModuleType) -> set[str]:
    """The module's own public names: its functions, classes and constants, not what it
    imported (other modules, their functions and classes)."""
    names = set()
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        owner = getattr(value, "__module__", None)
        if (inspect.isclass(value) or callable(value)) and owner != module.__name__:
            continue
        names.add(name)
    return names


def _class_public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def _stub_parameters(node: ast.FunctionDef) -> list[tuple[str, str, bool, object]]:
    """(name, kind, has default, literal default or Ellipsis) of each parameter."""
    args = node.args
    out: list[tuple[str, str, bool, object]] = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults, strict=True):
        kind = _KINDS["posonlyargs" if arg in args.posonlyargs else "args"]
        out.append((arg.arg, kind.name, default is not None, _literal(default)))
    if args.vararg is not None:
        out.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL.name, False, ...))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append((arg.arg, _KINDS["kwonlyargs"].name, default is not None, _literal(default)))
    if args.kwarg is not None:
        out.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD.name, False, ...))
    return out


def _literal(node: ast.AST | None) -> object:
    if node is None:
        return ...
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ...


def _runtime_parameters(func: object) -> list[tuple[str, str, bool, object]] | None:
    try:
        signature = inspect.signature(func)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None  # a slot wrapper or builtin inspect cannot read: names are checked only
    return [(p.name, p.kind.name, p.default is not inspect.Parameter.empty,
             p.default if p.default is not inspect.Parameter.empty else ...)
            for p in signature.parameters.values()]


def _signature_problems(where: str, node: ast.FunctionDef, func: object) -> list[str]:
    runtime = _runtime_parameters(func)
    if runtime is None:
        return []
    stub = _stub_parameters(node)
    if [p[:3] for p in stub] != [p[:3] for p in runtime]:
        return [f"{where}: stub parameters {[p[:3] for p in stub]} != module's "
                f"{[p[:3] for p in runtime]}"]
    problems = []
    for (name, _, has, stub_default), (_, _, _, runtime_default) in zip(stub, runtime,
                                                                        strict=True):
        if has and stub_default is not ... and stub_default != runtime_default:
            problems.append(f"{where}: default of {name} is {runtime_default!r} in the "
                            f"module, {stub_default!r} in the stub")
    return problems


def stub_problems(name: str) -> list[str]:
    """Every difference between ``kipproducer.<name>`` and its stub, as sentences."""
    module = importlib.import_module(f"kipproducer.{name}")
    stub = _stub(name)
    problems = []
    runtime_names = _module_public(module)
    stub_names = set(stub.names) - stub.aliases()
    for missing in sorted(runtime_names - stub_names):
        problems.append(f"{name}.{missing} is not in {name}.pyi")
    for extra in sorted(stub_names - set(vars(module))):
        problems.append(f"{name}.pyi declares {extra}, which the module does not have")
    for top, node in stub.names.items():
        value = getattr(module, top, None)
        if value is None:
            continue
        if isinstance(node, ast.FunctionDef):
            if not callable(value):
                problems.append(f"{name}.{top} is a function in the stub, not in the module")
            else:
                problems += _signature_problems(f"{name}.{top}", node, value)
        elif isinstance(node, ast.ClassDef):
            if not inspect.isclass(value):
                problems.append(f"{name}.{top} is a class in the stub, not in the module")
                continue
            problems += _class_problems(f"{name}.{top}", stub.classes[top], value)
    return problems


def _class_problems(where: str, members: dict[str, ast.AST], cls: type) -> list[str]:
    problems = []
    for missing in sorted(_class_public(cls) - set(members)):
        problems.append(f"{where}.{missing} is not in the stub")
    for member, node in members.items():
        if member == "__buffer__" and sys.version_info < (3, 12):
            continue  # the buffer protocol has a Python name from 3.12 (PEP 688)
        if not hasattr(cls, member):
            problems.append(f"the stub declares {where}.{member}, which the class does not "
                            f"have")
            continue
        raw = inspect.getattr_static(cls, member)
        is_method = isinstance(node, ast.FunctionDef) and not _is_property(node)
        if is_method != callable(raw):
            problems.append(f"{where}.{member} is a {'method' if is_method else 'attribute'} "
                            f"in the stub, not in the class")
        elif is_method and not member.startswith("__"):
            # (a special method of an extension type is a slot wrapper: (self, /, ...))
            problems += _signature_problems(f"{where}.{member}", node, raw)  # type: ignore
    return problems


@pytest.mark.parametrize("name", COMPILED)
def test_stub_says_what_the_compiled_module_has(name):
    assert stub_problems(name) == []


def test_every_compiled_module_has_a_stub_that_says_where_its_source_is():
    compiled = sorted(p.name.split(".")[0] for p in PACKAGE.glob("_*.*")
                      if p.suffix in (".so", ".pyd"))
    assert compiled == COMPILED
    for name in COMPILED:
        head = (PACKAGE / f"{name}.pyi").read_text(encoding="utf-8").splitlines()[0]
        source = f"src/_accel/{name.lstrip('_')}.pyx"
        assert source in head, (name, head)
        assert (PACKAGE.parents[1] / source).exists() or not (PACKAGE.parents[1] /
                                                               "src").exists()


def test_the_check_finds_what_a_stub_lacks_or_has_too_much(tmp_path, monkeypatch):
    """The check itself: a stub without a function and with one the module lacks, a class
    member missing, and a wrong signature are each reported."""
    text = (PACKAGE / "_crc32c.pyi").read_text(encoding="utf-8")
    text = text.replace("def hardware_available() -> bool: ...\n", "")
    text = text.replace("def crc32c(data: Buffer, crc: int = 0)", "def crc32c(data: Buffer)")
    text += "def not_there() -> None: ...\n"
    (tmp_path / "_crc32c.pyi").write_text(text, encoding="utf-8")
    lock = (PACKAGE / "_sender_lock.pyi").read_text(encoding="utf-8")
    (tmp_path / "_sender_lock.pyi").write_text(
        lock.replace("    def locked(self) -> bool: ...\n", ""), encoding="utf-8")
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path)
    crc = stub_problems("_crc32c")
    assert "_crc32c.hardware_available is not in _crc32c.pyi" in crc
    assert "_crc32c.pyi declares not_there, which the module does not have" in crc
    assert any(p.startswith("_crc32c.crc32c: stub parameters") for p in crc), crc
    assert stub_problems("_sender_lock") == [
        "_sender_lock.SenderFirstLock.locked is not in the stub"]
