"""The type checker runs with the tests: mypy over the installed ``seglog`` package and
``pyspark_seglog`` (the packages and settings are ``[tool.mypy]`` in pyproject.toml).

mypy's incremental cache lives in ``.mypy_cache`` at the repository root (gitignored), so
a run after the first re-checks only what changed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_mypy_reports_no_error() -> None:
    run = _mypy("--verbose")  # the packages come from pyproject.toml
    assert run.returncode == 0, f"mypy found errors:\n{run.stdout}{run.stderr[-3000:]}"
    assert "Success: no issues found" in run.stdout, run.stdout
    # A configuration that checked nothing would pass too: each layer and the CLI are in.
    checked = set(re.findall(r"Found source: .*module='([\w.]+)'", run.stderr))
    for module in (
        "seglog.logstore.manager.log_manager",
        "seglog.logstore.cleaner.cleaner",
        "seglog.streaming.sink_commit",
        "seglog.datasource.data_source",
        "seglog.cli",
        "pyspark_seglog",
    ):
        assert module in checked, f"mypy did not check {module}"


_LOOSE = """
import json

from seglog.streaming.source_options import TopicPartition

def untyped(x):
    return x

def bare() -> dict:
    return {}

def leaks(raw: str) -> int:
    return json.loads(raw)

def offsets() -> list[TopicPartition]:
    return []
"""


def test_the_checker_is_strict(tmp_path: Path) -> None:
    """``--strict`` is in force (pyproject's ``strict = true``): what it adds to mypy's
    defaults is refused in a file checked with the project's settings, one error each."""
    loose = tmp_path / "loose.py"
    loose.write_text(_LOOSE)
    run = _mypy(str(loose))
    codes = re.findall(r"loose\.py:\d+: error: .*\[([\w-]+)\]$", run.stdout, re.M)
    assert sorted(codes) == ["attr-defined", "no-any-return", "no-untyped-def", "type-arg"], (
        run.stdout
    )


_USES = """
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager

def uses(mgr: LogManager, reader: LogDirsReader) -> None:
    reveal_type(mgr.get_log("t", 0))
    reveal_type(mgr.append("t", 0, b""))
    reveal_type(mgr.clean())
    reveal_type(reader.get_log("t", 0))
    reader.get_log("t", 0).truncate_to(0)
"""


def test_the_manager_api_is_typed(tmp_path: Path) -> None:
    """What callers get is checked, not ``Any``: a writer's logs are ``Log``s, a reader's
    ``LogReader``s (on which a writer operation does not type-check)."""
    uses = tmp_path / "uses.py"
    uses.write_text(_USES)
    run = _mypy(str(uses))
    revealed = re.findall(r'Revealed type is "([^"]+)"', run.stdout)
    assert revealed == [
        "seglog.logstore.log.log.Log",
        "seglog.logstore.log.log.AppendInfo",
        "seglog.logstore.cleaner.cleaner_stats.CleanerStats | None",
        "seglog.logstore.log.log_reader.LogReader",
    ], run.stdout
    assert '"LogReader" has no attribute "truncate_to"' in run.stdout, run.stdout


_CONFORM = """
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.log_dirs_api import LogDirs, LogDirsView, PartitionLogView
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager

def conform(local: LogManager, reader: LogDirsReader, bucket: BucketLogManager) -> None:
    writer: LogDirs = local
    writer = bucket
    writer = reader  # its writer calls raise ReadOnlyError
    view: LogDirsView = reader
    view = local
    view = bucket
    log: PartitionLogView = local.get_log("t", 0)
    log = reader.get_log("t", 0)
    log = bucket.get_log("t", 0)
    not_a_writer: LogDirs = object()  # the control: mypy must refuse this one
"""


def test_every_backend_has_the_log_dirs_interface(tmp_path: Path) -> None:
    """The three backends satisfy the Protocols of ``log_dirs_api`` (checked here, not in
    the module: importing the backends there would close an import cycle)."""
    conform = tmp_path / "conform.py"
    conform.write_text(_CONFORM)
    run = _mypy(str(conform))
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "conform.py:17:" in errors[0], run.stdout


def _kernel_modules() -> set[str]:
    """The modules of pyproject's mypy override for numba kernels (the one whose comment
    documents why they stay unannotated). Read as text: tomllib is 3.11+, the suite runs
    on 3.10 too."""
    blocks = (ROOT / "pyproject.toml").read_text().split("[[tool.mypy.overrides]]")[1:]
    kernels = [b for b in blocks if re.search(r"^disallow_untyped_defs = false$", b, re.M)]
    assert len(kernels) == 1, blocks
    listed = re.search(r"^module = \[(.*?)\]", kernels[0], re.M | re.S)
    assert listed is not None, kernels[0]
    return set(re.findall(r'"([\w.]+)"', listed.group(1)))


def _checked_modules() -> dict[str, Path]:
    """Every module mypy checks, by name (the layer folders through their seglog links)."""
    import os

    out: dict[str, Path] = {}
    for package in ("seglog", "pyspark_seglog"):
        for folder, _dirs, files in os.walk(ROOT / "src" / package, followlinks=True):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = Path(folder) / f
                    parts = path.relative_to(ROOT / "src").with_suffix("").parts
                    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def type_ignores(modules: dict[str, Path], allowed: set[str]) -> list[str]:
    """``module:line`` of each ``# type: ignore`` comment outside ``allowed``."""
    import tokenize

    found = []
    for name, path in modules.items():
        if name in allowed:
            continue
        with path.open("rb") as f:
            for tok in tokenize.tokenize(f.readline):
                if tok.type == tokenize.COMMENT and re.match(r"#\s*type:\s*ignore", tok.string):
                    found.append(f"{name}:{tok.start[0]}")
    return found


def test_no_type_ignore_outside_the_kernel_modules(tmp_path: Path) -> None:
    """An ignore hides every error on its line, present and future: a type the checker
    cannot see is stated with a ``cast`` (its reason beside it) instead. Only the numba
    kernel modules of pyproject's override may hold one."""
    modules = _checked_modules()
    kernels = _kernel_modules()
    assert kernels <= modules.keys(), sorted(kernels - modules.keys())
    assert "seglog.logstore.storage.object_storage" in modules  # the walk sees the layers
    assert type_ignores(modules, kernels) == []
    # The control: a real file with one is found, a string that merely says it is not.
    probe = tmp_path / "probe.py"
    probe.write_text('x: int = "a"  # type: ignore[assignment]\ny = "# type: ignore"\n')
    assert type_ignores({"probe": probe}, set()) == ["probe:1"]
    assert type_ignores({"probe": probe}, {"probe"}) == []


_FACTORY = """
from seglog.logstore.manager.log_manager import LogManager, open_log_dirs

def opens(path: str, flag: bool) -> None:
    reveal_type(LogManager(path))
    reveal_type(open_log_dirs(path))
    reveal_type(open_log_dirs(path, read_only=True))
    reveal_type(open_log_dirs("s3://bucket/logs", storage_options={"region": "x"}))
    LogManager(path, read_only=True)
    LogManager(path, read_only=flag)
    LogManager("s3://bucket/logs", storage_options={"region": "x"})
    LogManager(path, config={"log.retention.check.interval.ms": 1000})
    LogManager(path, config={"log.retention.check.interval.ms": object()})
"""


def test_what_log_manager_returns_is_typed_or_flagged(tmp_path: Path) -> None:
    """``LogManager(path)`` is a ``LogManager``; the calls that return another backend
    (a reader, a bucket manager) are flagged and point to ``open_log_dirs``, whose results
    are the interfaces; a config value is checked, not ``Any``."""
    opens = tmp_path / "opens.py"
    opens.write_text(_FACTORY)
    run = _mypy(str(opens))
    revealed = re.findall(r'Revealed type is "([^"]+)"', run.stdout)
    assert revealed == [
        "seglog.logstore.manager.log_manager.LogManager",
        "seglog.logstore.log_dirs_api.LogDirs",
        "seglog.logstore.log_dirs_api.LogDirsView",
        "seglog.logstore.log_dirs_api.LogDirs",
    ], run.stdout
    errors = re.findall(r"opens\.py:(\d+): error: (.*)", run.stdout)
    lines = [int(line) for line, _ in errors]
    assert lines == [9, 10, 11, 13], run.stdout
    assert all("open_log_dirs" in text for _, text in errors[:3]), run.stdout
    assert "object" in errors[3][1], run.stdout
