"""seglog: a Kafka-compatible segmented log with no broker.

Layers (dependencies point one way): ``seglog.datasource`` (PySpark adapters) →
``seglog.streaming`` (Spark-free protocol logic) → ``seglog.logstore`` (the storage engine).
"""

__version__ = "0.1.0"
