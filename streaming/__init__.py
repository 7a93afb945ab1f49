"""Spark-free protocol logic: options, offsets, admission control, the sink's commit protocol."""

from seglog import refuse_second_copy

refuse_second_copy(__name__, "seglog.streaming")
