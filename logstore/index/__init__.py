"""A segment's indexes: offset, time and transaction indexes, the lazily opened index, and
Kafka's index rules (which entries a lookup may use).

May import: ``errors``, ``storage``, ``util``, ``records``, ``config`` (the order
``tests/test_layering.py`` checks; its ``ALLOWED_UPWARD`` names the exceptions).
"""
