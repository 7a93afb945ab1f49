"""No import cycles inside seglog: each module can be read, tested and replaced after the
modules it imports, never together with them.

Every ``import`` of a seglog module counts, at module level or inside a function. A
function-level import hides a cycle from Python's import machinery but not from the
design: the two modules still need each other to be understood or changed (a second
storage backend would have to replace both at once), and the deferred import runs under
the interpreter's import lock on first call. ``if TYPE_CHECKING:`` imports count too: they
never run, but a module that names another's class in its annotations is written against
it, and a cycle closed that way is the same two-way dependency (a helper typed on the
manager that calls it). The usual fix is a Protocol, or a small class the helper is
handed, in a module both can import.

A cycle through module-level imports alone is the worse failure (which module loads
first decides whether the other sees half-initialised names); it is reported separately.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

SEGLOG = Path(__file__).resolve().parent.parent / "src" / "seglog"


def _modules() -> dict[str, Path]:
    """Module name -> file, following the symlinked layer folders."""
    out = {}
    for folder, _dirs, files in os.walk(SEGLOG, followlinks=True):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = Path(folder) / f
            parts = list(path.relative_to(SEGLOG.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, set[str]]:
    """The seglog modules ``name`` imports: {"module": ..., "function": ..., "type": ...}
    ("type": under ``if TYPE_CHECKING:``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, set[str]] = {"module": set(), "function": set(), "type": set()}

    def targets(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            return {a.name for a in node.names}
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        subs = {f"{module}.{a.name}" for a in node.names} & modules.keys()
        return subs or {module}

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "type" if kind == "type" else "function")
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(ast.Module(body=child.body, type_ignores=[]), "type")
                visit(ast.Module(body=child.orelse, type_ignores=[]), kind)
            else:
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    found[kind] |= targets(child)
                visit(child, kind)

    visit(ast.parse(path.read_text(), filename=str(path)), "module")
    return {k: {m for m in v if m in modules and m != name} for k, v in found.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as one
    cycle through them, named in import order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_one_cycle(graph, comp) for comp in components]


def _one_cycle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    start = min(comp)
    paths = {start: [start]}
    todo = [start]
    while todo:  # breadth first: the shortest way back to ``start``
        v = todo.pop(0)
        for w in sorted(graph[v] & comp):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(comp)}")


def _graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = _modules()
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    return (
        {n: e["module"] for n, e in edges.items()},
        {n: e["module"] | e["function"] | e["type"] for n, e in edges.items()},
    )


def test_the_module_walk_sees_every_layer():
    modules = _modules()
    for name in (
        "seglog.cli",
        "seglog.logstore.log.log",
        "seglog.streaming.source_offsets",
        "seglog.datasource.data_source",
    ):
        assert name in modules
    module_level, _ = _graphs()
    assert "seglog.logstore.log.log_segment" in module_level["seglog.logstore.log.log"]


def test_no_cycle_through_module_level_imports():
    module_level, _ = _graphs()
    assert [" -> ".join(c) for c in _cycles(module_level)] == []


def test_no_import_cycle_at_all():
    _, every = _graphs()
    assert [" -> ".join(c) for c in _cycles(every)] == []


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    """Real files: ``a`` imports ``b`` inside a function, ``b`` imports ``a`` at the top;
    an import under ``if TYPE_CHECKING:`` is a "type" edge, not a module-level one."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    from . import b\n    return b\n")
    (pkg / "b.py").write_text("from . import a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    modules = {f"pkg.{m}": pkg / f"{m}.py" for m in ("a", "b", "c")}
    edges = {n: _imports(n, p, modules) for n, p in modules.items()}
    assert edges["pkg.a"] == {"module": set(), "function": {"pkg.b"}, "type": set()}
    assert edges["pkg.c"] == {"module": set(), "function": set(), "type": {"pkg.a"}}
    every = {n: e["module"] | e["function"] for n, e in edges.items()}
    assert _cycles(every) == [["pkg.a", "pkg.b", "pkg.a"]]
    assert _cycles({n: e["module"] for n, e in edges.items()}) == []


def _manager_and_helper(tmp_path, *, with_values: bool = False) -> dict[str, Path]:
    """Real files, the shape of a helper typed on its manager: ``pkg.manager`` imports
    ``pkg.helper`` inside a method, the helper names the manager only under
    ``if TYPE_CHECKING:`` (and, ``with_values``, a ``pkg.values`` that imports nothing)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "manager.py").write_text(
        "class Manager:\n    def run(self):\n"
        "        from . import helper\n"
        "        return helper.run(self)\n"
    )
    values = "    from .values import Value\n" if with_values else ""
    (pkg / "helper.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .manager import Manager\n"
        f"{values}"
        "def run(mgr: 'Manager') -> None:\n    pass\n"
    )
    names = ["manager", "helper"]
    if with_values:
        (pkg / "values.py").write_text("class Value:\n    pass\n")
        names.append("values")
    return {f"pkg.{m}": pkg / f"{m}.py" for m in names}


def test_a_cycle_closed_by_a_type_checking_import_is_found(tmp_path):
    """Real files, the shape of a helper typed on its manager: ``manager`` imports
    ``helper`` inside a method, ``helper`` names the manager only under
    ``if TYPE_CHECKING:``. The whole-tree graph holds the cycle; the module-level one
    does not."""
    modules = _manager_and_helper(tmp_path)
    edges = {n: _imports(n, p, modules) for n, p in modules.items()}
    assert edges["pkg.helper"]["type"] == {"pkg.manager"}
    every = {n: e["module"] | e["function"] | e["type"] for n, e in edges.items()}
    assert _cycles(every) == [["pkg.helper", "pkg.manager", "pkg.helper"]]
    assert _cycles({n: e["module"] for n, e in edges.items()}) == []


def type_cycle_closers(edges: dict[str, dict[str, set[str]]]) -> list[str]:
    """Each ``if TYPE_CHECKING:`` import that closes a cycle, with the way back through
    the other imports (of any kind): ``a => b -> ... -> a``. The import to move: the type
    it names belongs in a module beneath both."""
    every = {n: e["module"] | e["function"] | e["type"] for n, e in edges.items()}
    found = []
    for a in sorted(edges):
        for b in sorted(edges[a]["type"]):
            way = {b: [b]}
            todo = [b]
            while todo and a not in way:  # breadth first: the shortest way back to ``a``
                v = todo.pop(0)
                for w in sorted(every.get(v, ())):
                    if w not in way:
                        way[w] = way[v] + [w]
                        todo.append(w)
            if a in way:
                found.append(f"{a} => " + " -> ".join(way[a]))
    return found


def test_no_type_checking_import_closes_a_cycle():
    modules = _modules()
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert sum(len(e["type"]) for e in edges.values()) > 10  # the walk sees them
    assert type_cycle_closers(edges) == []


def test_a_type_checking_import_closing_a_cycle_is_named(tmp_path):
    """Real files: the helper's type-only import of its manager closes the cycle the
    manager's call opened; a type-only import of a module that imports nothing back
    closes none."""
    modules = _manager_and_helper(tmp_path, with_values=True)
    edges = {n: _imports(n, p, modules) for n, p in modules.items()}
    assert edges["pkg.helper"]["type"] == {"pkg.manager", "pkg.values"}
    assert type_cycle_closers(edges) == ["pkg.helper => pkg.manager -> pkg.helper"]
