"""Compaction: the cleaner, its manager (which log is cleanable), the offset map, the
keep/drop/rewrite kernels; typed on ``CleanableLog`` so a bucket partition is cleaned by
the same code.

May import: ``errors``, ``storage``, ``util``, ``records``, ``config``, ``index``, ``log``
(the order ``tests/test_layering.py`` checks; its ``ALLOWED_UPWARD`` names the exceptions).
"""
