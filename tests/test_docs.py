"""User documentation stays true: the options reference is what the code declares, the
declared defaults are the parsers' defaults, every relative link and anchor resolves inside
the repository, and examples rely on auto-registration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seglog.logstore.config.config import LogConfig
from seglog.streaming import option_docs
from seglog.streaming.sink_options import SINK_OPTIONS, SinkOptions
from seglog.streaming.source_options import SOURCE_OPTIONS, SourceOptions, parse_duration_ms

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def test_options_reference_is_generated_from_the_code():
    assert (ROOT / "docs" / "options.md").read_text() == option_docs.render(), (
        "docs/options.md is stale: python -m seglog.streaming.option_docs > docs/options.md"
    )


def test_declared_defaults_are_the_parsers_defaults():
    source = {o.name: o.default for o in SOURCE_OPTIONS}
    stream = SourceOptions.parse({"path": "/d", "subscribe": "t"}, streaming=True)
    assert str(stream.fail_on_data_loss).lower() == source["failOnDataLoss"]
    assert str(stream.include_headers).lower() == source["includeHeaders"]
    assert stream.starting_by_timestamp_strategy == source["startingOffsetsByTimestampStrategy"]
    assert stream.max_trigger_delay_ms == parse_duration_ms(source["maxTriggerDelay"], "x")
    assert source["endingOffsets"] == "latest"
    sink = {o.name: o.default for o in SINK_OPTIONS}
    o = SinkOptions.parse({"path": "/d"})
    assert (
        o.compression,
        str(o.create_topics).lower(),
        str(o.num_partitions),
        str(o.allow_expired_timestamps).lower(),
        str(o.max_batch_bytes),
        str(o.lock_timeout_ms),
        str(o.maintenance_interval_ms),
        str(o.merge_small_segments).lower(),
    ) == (
        sink["compression.type"],
        sink["createTopics"],
        sink["numPartitions"],
        sink["allowExpiredTimestamps"],
        sink["maxBatchBytes"],
        sink["lockTimeoutMs"],
        sink["maintenanceIntervalMs"],
        sink["mergeSmallSegments"],
    )
    rendered = option_docs.render()
    assert all(f"`{k.name}`" in rendered for k in LogConfig.KEYS)


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {_slug(m[1]) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves_inside_the_repository(page: Path):
    text = page.read_text()
    assert "../shared" not in text
    for target in _LINK.findall(_FENCE.sub("", text)):
        if re.match(r"^[a-z]+:", target):
            assert target.startswith("https://"), f"{page.name}: {target}"
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
        assert dest.exists(), f"{page.name}: {target} does not exist"
        if anchor:
            assert anchor in _anchors(dest), f"{page.name}: no heading for {target}"


def test_link_check_catches_a_broken_anchor(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## Some `code` section\n")
    assert _anchors(page) == {"title", "some-code-section"}


def test_examples_rely_on_auto_registration():
    sources = [*(ROOT / "examples").glob("*.py"), *PAGES]
    for path in sources:
        text = path.read_text()
        code = text if path.suffix == ".py" else "\n".join(_FENCE.findall(text))
        assert "dataSource.register(" not in code, path.name


def _module_table(page: str, heading: str) -> str:
    """The text of a section of docs/internals.md up to its first sub-heading."""
    section = page.split(f"\n{heading}\n", 1)[1]
    return re.split(r"^#", section, maxsplit=1, flags=re.M)[0]


def test_internals_names_every_logstore_module_by_its_path():
    page = (ROOT / "docs" / "internals.md").read_text()
    table = _module_table(page, "## logstore/ — the storage engine")
    named = {
        m
        for row in re.findall(r"^\| (.*?) \| ", table, re.M)
        for m in re.findall(r"`([\w/]+\.py)`", row)
    }
    logstore = ROOT / "logstore"
    modules = {
        p.relative_to(logstore).as_posix()
        for p in logstore.rglob("*.py")
        if p.name != "__init__.py"
    }
    assert sorted(named - modules) == [], "named in docs/internals.md, no such module"
    assert sorted(modules - named) == [], "modules docs/internals.md does not name"
    paths = set(
        re.findall(
            r"(?<![\w/])logstore/((?:\w+/)*\w+\.py)",
            "\n".join(p.read_text() for p in [*PAGES, ROOT / "benchmarks" / "README.md"]),
        )
    )
    assert sorted(paths - modules) == [], "logstore/...py paths the docs name that do not exist"
