"""No module over 500 lines without a reason (issue 24): a module of ``logstore/``,
``streaming/``, ``datasource/`` or ``src/seglog/cli*.py`` longer than ``MAX_LINES`` is
split by concept, or its docstring has a line starting with ``MARKER`` that says why it
is one thing that splitting would hurt."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 500
MARKER = "Over 500 lines:"

def _modules() -> list[Path]:
    found = [
        p for layer in ("logstore", "streaming", "datasource") for p in (ROOT / layer).rglob("*.py")
    ]
    return sorted(found + list((ROOT / "src" / "seglog").glob("cli*.py")))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def has_reason(source: str) -> bool:
    """True when the module docstring has a line starting with ``MARKER`` followed by a
    reason (a bare marker says nothing)."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return any(
        line.strip().startswith(MARKER) and line.strip() != MARKER for line in doc.splitlines()
    )


def oversized(paths: list[Path], root: Path = ROOT) -> list[str]:
    """The modules of ``paths`` over ``MAX_LINES`` lines without the marker, relative to
    ``root``."""
    return [
        f"{p.relative_to(root)}: {_lines(p)} lines"
        for p in paths
        if _lines(p) > MAX_LINES and not has_reason(p.read_text())
    ]


def test_every_module_over_500_lines_says_why():
    unexplained = oversized(_modules())
    assert unexplained == [], (
        f"split these by concept, or add a docstring line '{MARKER} <why>': {unexplained}"
    )


def test_the_check_reads_the_docstring_only(tmp_path):
    body = "x = 1\n" * (MAX_LINES + 1)
    plain = tmp_path / "plain.py"
    plain.write_text(f'"""A module."""\n{body}')
    marked = tmp_path / "marked.py"
    marked.write_text(f'"""A module.\n\n{MARKER} one cohesive state machine.\n"""\n{body}')
    bare = tmp_path / "bare.py"
    bare.write_text(f'"""A module.\n\n{MARKER}\n"""\n{body}')
    in_comment = tmp_path / "in_comment.py"
    in_comment.write_text(f'"""A module."""\n# {MARKER} not in the docstring\n{body}')
    short = tmp_path / "short.py"
    short.write_text('"""A module."""\nx = 1\n')
    paths = [plain, marked, bare, in_comment, short]
    names = [m.split(":")[0] for m in oversized(paths, tmp_path)]
    assert names == ["plain.py", "bare.py", "in_comment.py"]
