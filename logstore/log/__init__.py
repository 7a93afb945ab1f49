"""One partition's log: segments assembled from parts, the writer ``Log``, the reader
``LogReader``, the shared read path, recovery, validation of appends, producer state
and transactions, retention rules, offset continuity.

May import: ``errors``, ``storage``, ``util``, ``records``, ``config``, ``index`` (the order
``tests/test_layering.py`` checks; its ``ALLOWED_UPWARD`` names the exceptions).
"""
