"""Each layer keeps the errors it raises: ``logstore/errors.py`` holds only what the
engine raises (or a base of it), ``streaming/errors.py`` what only the streaming layer
raises, every one a ``SeglogError``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from seglog.logstore import errors as engine_errors
from seglog.logstore.errors import SeglogError
from seglog.streaming import errors as streaming_errors

ROOT = Path(__file__).resolve().parent.parent.parent


def _classes(module) -> dict[str, type]:
    return {n: c for n, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__ == module.__name__}


def _names_used(folder: str, skip: str) -> set[str]:
    """Every identifier the modules of ``folder`` (but ``skip``) mention in code."""
    used: set[str] = set()
    for path in (ROOT / folder).rglob("*.py"):
        if path.relative_to(ROOT / folder).as_posix() == skip:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.alias):
                used.add(node.asname or node.name)
    return used


def test_the_engine_errors_module_holds_only_what_the_engine_raises():
    used = _names_used("logstore", skip="errors.py")
    classes = _classes(engine_errors)
    raised = {n for n in classes if n in used}
    bases = {b.__name__ for n in raised for b in classes[n].__mro__}
    assert sorted(set(classes) - raised - bases) == []


def test_streaming_errors_are_seglog_errors_the_streaming_layer_raises():
    used = _names_used("streaming", skip="errors.py")
    classes = _classes(streaming_errors)
    assert {"SinkCommitError", "LedgerDamagedError", "IntentDamagedError"} <= set(classes)
    for name, cls in classes.items():
        assert issubclass(cls, SeglogError), name
        assert name in used, f"{name} is raised nowhere in streaming/"
    assert not set(classes) & set(_classes(engine_errors))
