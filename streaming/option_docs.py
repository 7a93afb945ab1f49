"""Renders ``docs/options.md`` from the option declarations, so the reference cannot drift.

The source and sink options (``SOURCE_OPTIONS``, ``SINK_OPTIONS``), the Kafka connector
rules (``kafka_compat``) and the topic configs (``LogConfig.KEYS``) are each declared once
in the code; this module only formats them. ``tests/test_docs.py`` fails when the file
differs from what this renders. Regenerate with::

    python -m seglog.streaming.option_docs > docs/options.md
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from seglog.logstore.config.config import ConfigKey, LogConfig
from seglog.logstore.records.record_format import LONG_MAX

from .kafka_compat import SINK_RULES, SOURCE_RULES, TRIGGER_OPTIONS_IN_BATCH, CompatRule
from .option_values import OptionSpec
from .sink_options import SINK_OPTIONS
from .source_options import SOURCE_OPTIONS

__all__ = ["render"]

_HEADER = """\
# Options reference

<!-- Generated from the code by `python -m seglog.streaming.option_docs`; do not edit. -->

Option names are case-insensitive, as everywhere in Spark. An unknown option is an error
naming it, except the Kafka connector options listed under
[Kafka connector options](#kafka-connector-options).

### Durations

Every option that is a duration (`maxTriggerDelay`, the storage options `retry_timeout`,
`connect_timeout`, `read_timeout`...) is written as Spark writes durations
(`timeStringAsMs`): a whole number with an optional unit, `us`, `ms`, `s`, `m` or `min`,
`h`, `d`, e.g. `15m`, `30s`, `500ms`; a bare number is milliseconds. Options whose name ends
in `Ms` (`maxTriggerDelay` aside) and Kafka's `*.ms` topic configs take milliseconds only.
"""

_SOURCE = """\
## Source options

`spark.read.format("seglog")` and `spark.readStream.format("seglog")`. They follow Spark's
Kafka connector; "streaming" options are ignored with a warning by a batch read (as
Kafka's are), "batch" options are refused by a stream.
"""

_SINK = """\
## Sink options

`df.write.format("seglog")` and `df.writeStream.format("seglog")`. Input columns:
`value` (required, binary or string), `key` (binary or string), `topic` (string),
`partition` (int: a bigint is refused, as Kafka's sink refuses it), `headers`
(`array<struct<key: string, value: binary>>`: a string header value is refused, as in
Kafka's sink) and `timestamp` (timestamp, or long milliseconds; Kafka's sink has no such
column, seglog keeps it as the record's CreateTime). Other columns are ignored, as
Kafka's sink does. The options Spark itself passes (`path`, `queryName`,
`checkpointLocation`) are accepted.
"""

_KAFKA = """\
## Kafka connector options

What seglog does with the options of Spark's Kafka connector that name a broker setting.
*ignored*: accepted and named in one warning per query (they configure a connection that
does not exist here); *refused*: an error naming the option (they would change what is
read or written in a way seglog cannot honour, following Spark's own refusals); *same as*:
honoured as the seglog option named.
"""

_TOPIC = """\
## Topic configs

Kafka's topic configs, with Kafka's names, meanings and defaults. Give them to the sink as
`topic.<name>` options (for topics it creates), or to `LogManager.create_topic(...,
config={...})`. Retention deletes records silently: see
[Retention](operations.md#retention).
"""


def render() -> str:
    """The whole ``docs/options.md``."""
    parts = [
        _HEADER,
        _SOURCE, _options_table(SOURCE_OPTIONS, with_mode=True),
        _SINK, _options_table(SINK_OPTIONS, with_mode=False),
        _KAFKA,
        "### With the source\n", _rules_table((*SOURCE_RULES, TRIGGER_OPTIONS_IN_BATCH)),
        "### With the sink\n", _rules_table(SINK_RULES),
        _TOPIC, _config_table(LogConfig.KEYS),
    ]
    return "\n".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _options_table(specs: Iterable[OptionSpec], *, with_mode: bool) -> str:
    head = "| option | default | applies to | meaning |\n|---|---|---|---|\n" if with_mode \
        else "| option | default | meaning |\n|---|---|---|\n"
    rows = []
    for o in specs:
        default = f"`{o.default}`" if o.default and not o.default.startswith("(") \
            else o.default
        cells = [f"`{o.name}`", _cell(default)]
        if with_mode:
            cells.append("both" if o.mode == "both" else o.mode)
        cells.append(_cell(o.doc))
        rows.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def _rules_table(rules: Iterable[CompatRule]) -> str:
    rows = ["| option | seglog | why |", "|---|---|---|"]
    for r in rules:
        names = ", ".join(f"`{n.strip()}`" for n in r.name.split(","))
        action = {"ignore": "ignored", "refuse": "refused",
                  "map": f"same as `{r.target}`"}[r.action]
        rows.append(f"| {names} | {action} | {_cell(r.why)} |")
    return "\n".join(rows) + "\n"


def _config_default(key: ConfigKey) -> str:
    value: Any = key.default
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if value == LONG_MAX:
        return f"{LONG_MAX} (never)"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _config_table(keys: Iterable[ConfigKey]) -> str:
    rows = ["| config | default | meaning |", "|---|---|---|"]
    rows += [f"| `{k.name}` | `{_config_default(k)}` | {_cell(k.doc)} |" for k in keys]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
