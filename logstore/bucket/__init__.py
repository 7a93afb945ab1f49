"""The bucket engine: a log dir in an object store, immutable objects plus a
conditional-create commit log; its manager, appends, reads, maintenance (retention,
merge, compaction, collection), check, repair, import, export, the sink's staging keys.

May import: ``errors``, ``storage``, ``util``, ``records``, ``config``, ``index``, ``log``,
``cleaner``, ``log_dirs_api``, ``manager`` (the order ``tests/test_layering.py`` checks; its
``ALLOWED_UPWARD`` names the exceptions).
"""
