"""Kafka's record format: batch headers and their rules, the Arrow codec and its numba
kernels, compression codecs, legacy message sets, control records, the CRC scan.

May import: ``errors``, ``storage``, ``util`` (the order ``tests/test_layering.py`` checks;
its ``ALLOWED_UPWARD`` names the exceptions).
"""
