"""The storage engine: Kafka's log layer (LogManager → Log → LogSegment → indexes)."""

from seglog import refuse_second_copy

refuse_second_copy(__name__, "seglog.logstore")
