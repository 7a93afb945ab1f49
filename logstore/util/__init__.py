"""Engine helpers with no Kafka format: the injected clock, the named crash points of
tests, delayed deletion of ``.deleted`` files, arrays from Arrow's memory pool.

May import: ``errors``, ``storage`` (the order ``tests/test_layering.py`` checks; its
``ALLOWED_UPWARD`` names the exceptions).
"""
