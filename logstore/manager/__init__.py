"""The local managers of many logs over log dirs: ``LogManager`` (writer) and its
components, ``LogDirsReader``, the dir lock, the partition table, the maintenance
scheduler, ``check``; and
``open_log_dirs``/``LogManager(uri)``, the one factory that hands a bucket URI to
``bucket`` (a function-level import, the only upward one).

May import: ``errors``, ``storage``, ``util``, ``records``, ``config``, ``index``, ``log``,
``cleaner``, ``log_dirs_api`` (the order ``tests/test_layering.py`` checks; its
``ALLOWED_UPWARD`` names the exceptions).
"""
