"""PySpark adapters: the ``seglog`` data source (stream and batch, read and write)."""

from seglog import refuse_second_copy

refuse_second_copy(__name__, "seglog.datasource")

from .data_source import SeglogDataSource  # noqa: E402
from .spark_conf import LOW_LATENCY_SPARK_CONF  # noqa: E402

__all__ = ["SeglogDataSource", "LOW_LATENCY_SPARK_CONF"]
