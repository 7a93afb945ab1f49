"""The storage seam: ``Storage`` (what every log dir offers) with ``PosixStorage`` (a
filesystem, the only code that touches a file) and ``ObjectStorage`` (obstore: S3, GCS,
Azure, memory), object-store URIs and options, the duration syntax of every option,
file names, Kafka's checkpoint files (atomic write), the store probe.

May import: ``errors`` (the order ``tests/test_layering.py`` checks; its ``ALLOWED_UPWARD``
names the exceptions).
"""
