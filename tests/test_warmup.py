"""``python -m seglog.warmup`` reaches every numba kernel that seglog calls from Python,
so that a fresh install's first Spark action loads compiled code instead of compiling."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# Kernels that only other kernels call (compiled into their callers, so loading the caller
# from the cache leaves them untouched), and the cleaner's magic 0/1 path (documented in
# seglog.warmup as compiled on first use).
CALLED_FROM_KERNELS = {
    "codec_kernels._varint_size", "codec_kernels._write_varint", "codec_kernels._read_varint",
    "codec_kernels._put_be", "codec_kernels._copy",
    "segment_scan._be32", "segment_scan._beu32", "segment_scan._be64",
    "segment_scan._crc_finish", "legacy_records._be", "legacy_records._crc32",
    "cleaner_batches._rebased_record", "txn_scan._be16",
}
LEGACY_COMPACTION = {"offset_map._murmur3_128", "offset_map._put", "offset_map._get",
                     "cleaner_batches.rewrite_records"}

_SCRIPT = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    from numba.core.caching import NullCache
    from numba.core.registry import CPUDispatcher
    from seglog.warmup import main

    main([])
    import seglog.logstore, seglog.streaming
    idle = []
    for pkg in (seglog.logstore, seglog.streaming):
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for name, obj in vars(mod).items():
                if (isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__
                        and not isinstance(obj._cache, NullCache) and not obj.signatures):
                    idle.append(f"{info.name}.{name}")
    print(json.dumps(sorted(idle)))
""")


def test_warm_up_reaches_every_cached_kernel_called_from_python():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("compiling") and lines[-2].startswith("done in")
    idle = set(json.loads(lines[-1]))
    assert idle <= CALLED_FROM_KERNELS | LEGACY_COMPACTION
