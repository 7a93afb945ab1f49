"""No ``hasattr``/``getattr`` asks what kind of log, manager or result an object is.

Code that takes any backend is written against the Protocols of ``log_dirs_api``: a
capability the backends differ in is a member there (``is_remote``, ``one_refresh``,
``PartitionLogView.sync``...), so a probe like ``hasattr(log, "sync")`` or
``getattr(mgr, "uri", None)`` is a type the checker cannot see. The uses that stay are
listed below with their reason (a third-party object's optional attribute, a platform
constant, a field named by a table); a new one fails until it is either replaced by a
Protocol member or listed here with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("logstore", "streaming", "datasource", "src/seglog")

# Why each remaining probe is no kind test -> the probes ("file: the call as written").
_REASONS = {
    "numba's integer type named by its width": (
        "logstore/records/segment_scan.py: getattr(types, f'uint{crc_bits}')",
        "logstore/records/segment_scan.py: getattr(types, f'uint{data_bits}')",
    ),
    "a config dataclass's field named by its key table (ConfigKey.field)": (
        "logstore/config/config.py: getattr(base, k.field)",
        "logstore/config/config.py: getattr(self, k.field)",
        "logstore/config/topics.py: getattr(config, by_name[name].field)",
        "src/seglog/cli_topics.py: getattr(config, field)",
    ),
    "a platform constant some systems lack": (
        "logstore/storage/storage.py: getattr(os, 'O_DIRECTORY', 0)",
    ),
    "PySpark's pushed-down filter classes: only column filters have one": (
        "datasource/batch_reader.py: getattr(f, 'attribute', None)",
    ),
    "PySpark's pushed-down filter classes: only comparisons have one": (
        "datasource/batch_reader.py: getattr(f, 'value', None)",
    ),
    "argparse's namespace: only the commands that take --storage-option have it": (
        "src/seglog/cli_common.py: getattr(args, 'storage_option', None)",
    ),
    "a caller's text stream (a file-like object may lack isatty)": (
        "src/seglog/cli_output.py: getattr(stream, 'isatty', None)",
    ),
}
ALLOWED = {probe: reason for reason, probes in _REASONS.items() for probe in probes}


def attribute_probes(root: Path, layers: tuple[str, ...]) -> dict[str, int]:
    """``file: call`` -> how often, for every ``hasattr(...)``/``getattr(...)`` call."""
    found: dict[str, int] = {}
    seen: set[Path] = set()
    for layer in layers:
        for path in sorted((root / layer).rglob("*.py")):
            path = path.resolve()  # src/seglog links the layer folders: each file once
            if path in seen:
                continue
            seen.add(path)
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr")
                ):
                    key = f"{path.relative_to(root.resolve()).as_posix()}: {ast.unparse(node)}"
                    found[key] = found.get(key, 0) + 1
    return found


def test_no_new_attribute_probe():
    found = attribute_probes(ROOT, LAYERS)
    assert sorted(set(found) - set(ALLOWED)) == [], (
        "a hasattr/getattr test: make it a Protocol member, or list it with its reason"
    )
    assert sorted(set(ALLOWED) - set(found)) == [], "an allowed probe is gone: drop it"


def test_a_kind_test_is_found(tmp_path):
    """Real files: a probe of the manager's kind is found in a layer, with its file."""
    layer = tmp_path / "streaming"
    layer.mkdir()
    (layer / "reader.py").write_text(
        "def read(log, mgr):\n"
        "    if hasattr(log, 'sync'):\n        log.sync()\n"
        "    return getattr(mgr, 'uri', None)\n"
    )
    (layer / "clean.py").write_text("def read(log):\n    return log.sync()\n")
    assert attribute_probes(tmp_path, ("streaming",)) == {
        "streaming/reader.py: hasattr(log, 'sync')": 1,
        "streaming/reader.py: getattr(mgr, 'uri', None)": 1,
    }
