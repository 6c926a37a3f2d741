"""A little helper for writing Python source at run time and exec'ing it.

The encoder and decoder compilers emit one function per kio class; this holds the
lines, the names the code refers to, and a counter for fresh variable names.
"""

from __future__ import annotations

from typing import Any


class GeneratedSource:
    def __init__(self, base_namespace: dict[str, Any], label: str) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = dict(base_namespace)
        self._label = label
        self._counter = 0

    def fresh(self, prefix: str) -> str:
        """A variable name not used before in this source."""
        self._counter += 1
        return f"{prefix}{self._counter}"

    def bind(self, prefix: str, obj: Any) -> str:
        """A fresh global name for ``obj`` in the generated code."""
        name = self.fresh(prefix)
        self.namespace[name] = obj
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def compile(self, function_name: str) -> Any:
        code = "\n".join(self.lines)
        filename = f"<kipproducer {self._label} {function_name}>"
        exec(compile(code, filename, "exec"), self.namespace)
        return self.namespace[function_name]
