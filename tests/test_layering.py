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
        out = subprocess.run(
            [sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True
        )
        assert out.returncode != 0
        assert f"import seglog.{folder}, not {folder}" in out.stderr
    probe = ROOT / "logstore" / f"_probe_{tmp_path.name}.py"
    probe.write_text("VALUE = 42\n")
    try:
        code = (
            f"import seglog.logstore._probe_{tmp_path.name} as m, seglog.logstore as p; "
            "print(m.VALUE, p.__name__)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
        )
        assert out.stdout.split() == ["42", "seglog.logstore"], out.stderr
    finally:
        probe.unlink()


def test_src_holds_the_import_roots_and_links_to_the_layer_folders():
    src = ROOT / "src"
    assert sorted(
        p.name
        for p in src.iterdir()
        if not p.name.startswith((".", "_")) and not p.name.endswith(".egg-info")
    ) == ["pyspark_seglog", "seglog"]
    for folder in ("logstore", "streaming", "datasource"):
        link = src / "seglog" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()


# The order of logstore's sub-packages, lowest first (docs/internals.md, "Map"): a module
# imports only from its own package or a lower one. errors and log_dirs_api are the two
# top-level modules: errors beneath everything, log_dirs_api the callers' seam above the
# log and the cleaner and beneath the managers that implement it.
LOGSTORE_ORDER = (
    "errors",
    "storage",
    "util",
    "records",
    "config",
    "index",
    "log",
    "cleaner",
    "log_dirs_api",
    "manager",
    "bucket",
)

# Upward imports that stay, each with its reason; anything else upward fails the test.
ALLOWED_UPWARD = {
    # open_log_dirs/LogManager(uri): the one factory choosing the bucket backend, a
    # function-level import so a local manager never loads the bucket engine.
    ("manager.log_manager", "bucket.bucket_manager"): "the backend factory",
}


def _logstore_imports(root: Path, path: Path) -> set[tuple[str, str]]:
    """(importing module, imported module) inside logstore, both relative to logstore,
    for every import statement: module level, under TYPE_CHECKING or in a function."""
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    package = parts if path.name == "__init__.py" else parts[:-1]
    me = ".".join(parts)
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(["seglog", "logstore", *base, *filter(None, [node.module])])
            else:
                module = node.module or ""
            targets = [module, *(f"{module}.{a.name}" for a in node.names)]
        for target in targets:
            if target.startswith("seglog.logstore."):
                name = target.removeprefix("seglog.logstore.")
                if (root / f"{name.replace('.', '/')}.py").exists():
                    found.add((me, name))
    return found


def _layer(module: str) -> int:
    return LOGSTORE_ORDER.index(module.split(".")[0])


def upward_imports(root: Path) -> set[tuple[str, str]]:
    """Imports from a logstore package to a higher one in LOGSTORE_ORDER."""
    edges: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        if path.parent == root and path.name == "__init__.py":
            continue
        edges |= {(a, b) for a, b in _logstore_imports(root, path) if _layer(b) > _layer(a)}
    return edges


def test_every_logstore_package_is_in_the_declared_order():
    packages = {
        p.name for p in (ROOT / "logstore").iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    modules = {p.stem for p in (ROOT / "logstore").glob("*.py") if p.name != "__init__.py"}
    assert packages | modules == set(LOGSTORE_ORDER)


def test_logstore_packages_import_only_downward():
    upward = upward_imports(ROOT / "logstore")
    unexplained = sorted(upward - set(ALLOWED_UPWARD))
    assert unexplained == [], f"upward imports (see LOGSTORE_ORDER): {unexplained}"
    assert set(ALLOWED_UPWARD) <= upward, "an allowed upward import is gone: drop it"


def test_each_logstore_package_says_what_it_owns_and_may_import():
    for package in LOGSTORE_ORDER:
        init = ROOT / "logstore" / package / "__init__.py"
        if not init.exists():
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        below = LOGSTORE_ORDER[: LOGSTORE_ORDER.index(package)]
        assert "May import:" in doc, init
        named = doc.split("May import:", 1)[1]
        assert all(f"``{p}``" in named for p in below), (init, below)
