"""The managers' parts talk through public members (issue 24, "composition by
inheritance"): a bucket helper is handed a ``BucketCommitter`` instead of calling the
manager's ``_commit``/``_spec``/``_partition_state``, and the writer ``LogManager``'s
components (``log_manager_*.py``) own their state instead of sharing the manager's
``self._lock``/``self._partitions`` as mixins did.

Two rules, read from the source (``ast``), over the modules of that part:

- no ``obj._name`` where ``obj`` is not ``self``/``cls`` and ``_name`` is not defined in
  the same module (a module's own helper classes may share its private names);
- in the manager's component modules, no ``self._name`` that the module does not define:
  state a component uses is its own or reached through a public member of what it was
  handed (only the ``PartitionTable`` subclasses ``log_manager``/``log_dirs_reader``
  extend a base, and are not in that list).
"""

from __future__ import annotations

import ast
from pathlib import Path

LOGSTORE = Path(__file__).resolve().parent.parent / "src" / "seglog" / "logstore"

BUCKET_HELPERS = (
    "bucket_append",
    "bucket_committer",
    "bucket_export",
    "bucket_import",
    "bucket_maintenance",
    "bucket_manager",
    "bucket_pipeline",
)
MANAGER_COMPONENTS = (
    "log_manager_check",
    "log_manager_loading",
    "log_manager_maintenance",
    "log_manager_pause",
    "log_manager_topics",
)
CHECKED = (
    *BUCKET_HELPERS,
    *MANAGER_COMPONENTS,
    "log_manager",
    "log_check",
    "log_check_target",
    "partition_table",
)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.AST) -> set[str]:
    """Every name the module binds: functions, classes, attributes assigned, locals,
    imports."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
    return out


def foreign_private_accesses(source: str, *, self_too: bool) -> list[str]:
    """``obj._name`` accesses of names ``source`` does not define (and, with
    ``self_too``, ``self._name`` ones), as source text."""
    tree = ast.parse(source)
    defined = _defined(tree)
    found = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Attribute) and _private(n.attr)) or n.attr in defined:
            continue
        on_self = isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
        if self_too or not on_self:
            found.append(ast.unparse(n))
    return found


def _module(name: str) -> Path:
    """A logstore module by name, in whichever sub-package it lives."""
    (path,) = LOGSTORE.rglob(f"{name}.py")
    return path


def test_no_module_of_the_managers_reaches_into_another_objects_privates():
    found = {m: foreign_private_accesses(_module(m).read_text(), self_too=False) for m in CHECKED}
    assert {m: f for m, f in found.items() if f} == {}


def test_the_managers_components_use_no_inherited_private_state():
    found = {
        m: foreign_private_accesses(_module(m).read_text(), self_too=True)
        for m in MANAGER_COMPONENTS
    }
    assert {m: f for m, f in found.items() if f} == {}


def test_the_rules_see_what_they_forbid():
    helper = (
        "def append(mgr):\n    mgr._commit('append')\n"
        "class Mixin:\n    def f(self):\n        return self._partitions\n"
    )
    assert foreign_private_accesses(helper, self_too=False) == ["mgr._commit"]
    assert foreign_private_accesses(helper, self_too=True) == ["mgr._commit", "self._partitions"]
    own = (
        "class Part:\n    def __init__(self):\n        self._lock = 1\n"
        "    def f(self, other):\n        return self._lock, other._lock\n"
    )
    assert foreign_private_accesses(own, self_too=True) == []
