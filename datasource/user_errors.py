"""seglog's errors reach the Spark user as their one-line message, not a worker traceback.

PySpark runs a data source's methods in Python workers and reports a failure as
``[PYTHON_DATA_SOURCE_ERROR] Failed to ...: <the worker's traceback>`` (planning, in an
``AnalysisException``), ``[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python
streaming data source perform <method>: <traceback>`` (a stream's driver-side calls, inside
the ``StreamingQueryException``) or a ``PythonException`` in a failed task. That puts
seglog's message at the bottom of a long trace. PySpark 4.3 gives a data source no way to
shape that text except the one its ``handle_worker_exception`` documents: the environment
variable ``SPARK_HIDE_TRACEBACK`` (what ``spark.sql.execution.pyspark.udf.hideTraceback.
enabled`` sets for UDF workers), read when the error is reported. A ``SeglogError`` names
the option, file, topic-partition or offset concerned, so its traceback helps nobody: when
one leaves a method of the data source, its readers or writers (``user_errors``), seglog
sets that variable and the user reads ``...: seglog.logstore.errors.ConfigError:
<message>`` on the first line. Every PySpark worker that calls these methods exits right
after reporting an error (``handle_worker_exception`` then ``sys.exit(-1)``), so the
setting goes with the process. Any other exception (a bug) keeps its traceback.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from seglog.logstore.errors import SeglogError

__all__ = ["user_errors", "shown_in_one_piece", "iterated_in_one_piece"]

HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@contextmanager
def user_errors() -> Iterator[None]:
    """A ``SeglogError`` raised inside reaches the user as its message (see above)."""
    try:
        yield
    except SeglogError:
        os.environ[HIDE_TRACEBACK] = "1"
        raise


def shown_in_one_piece(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` under ``user_errors``."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with user_errors():
            return method(*args, **kwargs)

    return wrapper


def iterated_in_one_piece(items: Iterable[T]) -> Iterator[T]:
    """``items`` under ``user_errors`` while they are produced: a task's ``read()``
    returns a generator whose errors come while Spark iterates it."""
    with user_errors():
        yield from items
