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


def test_the_layer_folders_import_only_as_seglog_subpackages(tmp_path):
    """README "Layout": from the repository root, a folder is not a second top-level
    package (two copies of every module); through seglog it is the folder itself, so a
    new module needs no reinstall."""
    import subprocess
    import sys

    for folder in ("logstore", "streaming", "datasource"):
        out = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT,
                             capture_output=True, text=True)
        assert out.returncode != 0
        assert f"import seglog.{folder}, not {folder}" in out.stderr
    probe = ROOT / "logstore" / f"_probe_{tmp_path.name}.py"
    probe.write_text("VALUE = 42\n")
    try:
        code = (f"import seglog.logstore._probe_{tmp_path.name} as m, seglog.logstore as p; "
                "print(m.VALUE, p.__name__)")
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                             text=True)
        assert out.stdout.split() == ["42", "seglog.logstore"], out.stderr
    finally:
        probe.unlink()


def test_src_holds_the_import_roots_and_links_to_the_layer_folders():
    src = ROOT / "src"
    assert sorted(p.name for p in src.iterdir() if not p.name.startswith((".", "_"))
                  and not p.name.endswith(".egg-info")) == ["pyspark_seglog", "seglog"]
    for folder in ("logstore", "streaming", "datasource"):
        link = src / "seglog" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()
