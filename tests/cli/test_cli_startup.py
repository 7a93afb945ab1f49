"""The ``seglog`` command starts without what it does not use.

A command that reads metadata only (``topics``, ``describe``, ``get-offsets``, ``lag``,
``--version``, ``--help``) must not import the record codec's numba kernels, Arrow, the
object-store client, PySpark or the progress bar's library: each costs tens to hundreds
of milliseconds of start-up (``benchmarks/bench_cli_startup.py`` times it). Each case
runs the real entry point in a fresh interpreter and looks at ``sys.modules`` afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from seglog import cli_commands
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

HEAVY = (
    "numba",
    "llvmlite",
    "pyarrow",
    "pyarrow.compute",
    "obstore",
    "pyspark",
    "tqdm",
    "seglog.logstore.records.codec_kernels",
    "seglog.logstore.records.record_codec",
    "seglog.logstore.storage.object_storage",
    "seglog.logstore.bucket.bucket_manager",
    "seglog.logstore.manager.log_check",
    "seglog.cli_dump_log",
)


def _loaded_by(*argv: str) -> tuple[int, str, list[str]]:
    """``seglog argv`` through its entry point in a fresh interpreter: (exit status,
    output, the heavy modules it loaded)."""
    script = textwrap.dedent(f"""
        import io, json, sys
        from seglog.cli import main
        out = io.StringIO()
        try:
            code = main(json.loads(sys.argv[1]), out)
        except SystemExit as e:  # --version and --help exit from argparse
            code = e.code
        print(json.dumps({{"code": code, "out": out.getvalue(),
                          "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps([str(a) for a in argv])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc["code"], doc["out"], doc["loaded"]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    with LogManager([logs]) as mgr:
        mgr.create_topic("events", 2)
        mgr.create_topic("audit", 1)
        mgr.append("events", 0, encode_batches(pa.array([b"a", b"b", b"c"])))
        mgr.checkpoint_high_watermarks()
    return logs


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["topics", "--help"], ["consume", "--help"]],
    ids=lambda a: " ".join(a),
)
def test_version_and_help_load_nothing_heavy(argv: list[str]):
    code, _, loaded = _loaded_by(*argv)
    assert code == 0
    assert loaded == []


def test_metadata_commands_load_nothing_heavy(log_dir: Path, tmp_path: Path):
    chk = tmp_path / "chk"
    (chk / "offsets").mkdir(parents=True)
    (chk / "commits").mkdir()
    (chk / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"events": {"0": 1, "1": 0}}'
    )
    (chk / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    cases = {
        "topics": (["topics", "--path", log_dir], "audit\nevents\n"),
        "describe": (["describe", "events", "--path", log_dir, "--json"], '"endOffset":3'),
        "get-offsets": (["get-offsets", "--topic", "events", "--path", log_dir], "events:0:3\n"),
        "lag": (["lag", "--checkpoint", chk, "--path", log_dir, "--json"], '"totalLag":2'),
    }
    for name, (argv, expected) in cases.items():
        code, out, loaded = _loaded_by(*argv)
        assert code == 0, (name, out)
        assert expected in out, (name, out)
        assert loaded == [], name


def test_check_and_dump_log_load_no_numba(log_dir: Path):
    """They read batches with the format's own parser and never decode records
    (``dump-log --print-data-log`` does): no compiled kernels to load."""
    segment = log_dir / "events-0" / "00000000000000000000.log"
    for argv in (["check", log_dir], ["dump-log", segment]):
        code, out, loaded = _loaded_by(*argv)
        assert code == 0, (argv, out)
        assert "numba" not in loaded and "seglog.logstore.records.record_codec" not in loaded, argv


def test_a_command_that_decodes_records_still_loads_its_codec(log_dir: Path):
    """The counter-case: the lists above would catch a regression, not just pass."""
    code, out, loaded = _loaded_by("consume", "events", "--path", log_dir, "--from-beginning")
    assert code == 0
    assert out.splitlines() == ["a", "b", "c"]
    assert "seglog.logstore.records.record_codec" in loaded and "numba" in loaded


def test_every_registered_command_is_its_module_s():
    """Each name of the registry is exported by the module it names, and each module
    exports only registered names (a command added to a module but not to the registry
    would never run)."""
    by_module: dict[str, set[str]] = {}
    for name, entry in cli_commands.REGISTRY.items():
        by_module.setdefault(entry.module, set()).add(name)
        command = cli_commands.load(name)
        assert callable(command.add_args) and callable(command.run)
    for module, names in by_module.items():
        exported = set(__import__(module, fromlist=["COMMANDS"]).COMMANDS)
        assert exported == names, module
