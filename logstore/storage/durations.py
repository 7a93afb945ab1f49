"""One duration syntax for every seglog option: Spark's ``timeStringAsMs``.

A whole number with an optional unit, case-insensitive, spaces around it ignored:
``us``, ``ms``, ``s``, ``m`` or ``min``, ``h``, ``d``; a bare number is milliseconds
(Spark's and Kafka's ``*.ms`` convention). Source options (``maxTriggerDelay``), sink
options and storage options (``retry_timeout``, ``connect_timeout``...) all parse here,
so ``"30s"`` and ``"30000"`` mean the same thing wherever they are given.

>>> parse_duration_ms("15m", "maxTriggerDelay")
900000
>>> parse_duration_ms("250", "retry_timeout")
250
"""

from __future__ import annotations

import re

from ..errors import ConfigError

_DURATION_RE = re.compile(r"^([0-9]+)([a-z]+)?$")
# Units in microseconds, so "us" needs no fractions; the result is whole milliseconds,
# truncated as Spark's TimeUnit conversion does.
UNITS_US = {
    "us": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "min": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
}


def parse_duration_ms(value: str | int, option: str) -> int:
    """Milliseconds of ``value`` (see the module docstring); ``ConfigError`` naming
    ``option`` and the syntax otherwise. Negative durations are refused."""
    text = str(value).strip().lower()
    m = _DURATION_RE.match(text)
    if m is None or (m[2] is not None and m[2] not in UNITS_US):
        why = (
            "must not be negative"
            if text.startswith("-")
            else (
                f"expected a whole number with an optional unit ({', '.join(UNITS_US)}; "
                f"none means ms), e.g. '15m', '30s', '500'"
            )
        )
        raise ConfigError(f"invalid duration {value!r} for option {option!r}: {why}")
    return int(m[1]) * UNITS_US[m[2] or "ms"] // 1_000
