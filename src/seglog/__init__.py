"""seglog: a Kafka-compatible segmented log with no broker.

Layers (dependencies point one way): ``seglog.datasource`` (PySpark adapters) →
``seglog.streaming`` (Spark-free protocol logic) → ``seglog.logstore`` (the storage engine).
"""

__version__ = "0.1.0"


def refuse_second_copy(name: str, package: str) -> None:
    """Called first by ``logstore/``, ``streaming/`` and ``datasource/``: those folders sit
    at the repository root, where they are also importable as top-level packages, which
    would load every module a second time beside ``seglog.*`` (two copies of each class,
    lock and cache). Only ``seglog.<folder>`` may import them (README.md, "Layout")."""
    if name != package:
        raise ImportError(f"import {package}, not {name}: the folder {name}/ is the package "
                          f"{package} (see README.md, Layout)")
