"""What the README and docs claim holds: their library snippet runs, every ``seglog``
command they name exists, the versions they state are the ones the project pins, and no
page calls a shipped feature unsupported."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.cli_commands import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def test_the_readme_library_example_runs(tmp_path: Path):
    blocks = [b for b in _python_blocks((ROOT / "README.md").read_text())
              if "from seglog.logstore.manager.log_manager import LogManager" in b]
    assert len(blocks) == 1, "the README's library example moved: update this test"
    code = blocks[0].replace('"/data/logs"', repr(str(tmp_path / "logs")))
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 (the README's own snippet)
    rows = scope["rows"]
    assert isinstance(rows, pa.Table | pa.RecordBatch)
    assert rows.column("value").to_pylist() == [b"hello", b"world"]


def _named_commands() -> set[tuple[str, str]]:
    named = set()
    for page in PAGES:
        for m in re.finditer(r"`seglog ([a-z][a-z-]+)", page.read_text()):
            named.add((page.name, m[1]))
    return named


@pytest.mark.parametrize(("page", "command"), sorted(_named_commands()))
def test_every_command_the_docs_name_exists(page: str, command: str):
    assert command in REGISTRY, f"{page} names `seglog {command}`, which does not exist"


def test_stated_versions_are_the_pinned_ones():
    # tomllib is 3.11+, and the suite runs on 3.10 too: the two lines are read as text.
    project = (ROOT / "pyproject.toml").read_text()
    spark = re.search(r'^spark = \[("pyspark==[^"]+")', project, re.M)
    python = re.search(r'^requires-python = ">=([0-9.]+)"', project, re.M)
    assert spark and python
    readme = (ROOT / "README.md").read_text()
    assert f"`{spark[1].strip(chr(34))}`" in readme
    assert f"Python {python[1]}+" in readme


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_calls_object_storage_unsupported(page: Path):
    text = " ".join(page.read_text().split())
    for claim in ("not supported yet", "from the environment only", "no per-query storage options"):
        for m in re.finditer(re.escape(claim), text):
            context = text[max(0, m.start() - 200):m.end()]
            assert not re.search(r"object storage|s3://|bucket|storage option", context, re.I), (
                f"{page.name}: {context!r}")
