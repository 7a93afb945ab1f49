"""The layer rule of DESIGN.md: logstore/ and streaming/ never import pyspark."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_storage_and_protocol_layers_never_import_pyspark():
    offenders = []
    for layer in ("logstore", "streaming"):
        for path in (ROOT / layer).rglob("*.py"):
            bad = {m for m in _imported_modules(path) if m.split(".")[0] in ("pyspark", "py4j")}
            if bad:
                offenders.append(f"{path.relative_to(ROOT)}: {sorted(bad)}")
    assert offenders == []


def test_logstore_never_imports_upper_layers():
    for path in (ROOT / "logstore").rglob("*.py"):
        mods = _imported_modules(path)
        assert not any(m.startswith(("seglog.streaming", "seglog.datasource")) for m in mods), path
