"""``python -m seglog.warmup`` reaches every numba kernel that seglog calls from Python,
so that a fresh install's first Spark action loads compiled code instead of compiling."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# The cleaner's magic 0/1 path, documented in seglog.warmup as compiled on first use.
LEGACY_COMPACTION = {"offset_map._murmur3_128", "offset_map._put", "offset_map._get",
                     "cleaner_kernels.rewrite_records"}

# After the warm-up: every cached kernel with no compiled signature in this process,
# leaving out those another kernel calls (compiled into their callers, so loading the
# caller from the cache leaves them untouched).
_SCRIPT = textwrap.dedent("""
    import importlib, json, pkgutil
    from numba.core.caching import NullCache
    from numba.core.registry import CPUDispatcher
    from seglog.warmup import main

    main([])
    import seglog.logstore, seglog.streaming
    kernels = {}
    for pkg in (seglog.logstore, seglog.streaming):
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for name, obj in vars(mod).items():
                if (isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__
                        and not isinstance(obj._cache, NullCache)):
                    kernels[id(obj)] = (f"{info.name}.{name}", obj)
    called = set()
    for _, k in kernels.values():
        for ref in k.py_func.__code__.co_names:
            target = k.py_func.__globals__.get(ref)
            if id(target) in kernels:
                called.add(id(target))
    print(json.dumps(sorted(name for key, (name, k) in kernels.items()
                            if key not in called and not k.signatures)))
""")


def test_warm_up_reaches_every_cached_kernel_called_from_python():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("compiling") and lines[-2].startswith("done in")
    idle = set(json.loads(lines[-1]))
    assert idle <= LEGACY_COMPACTION


def test_a_reads_warm_up_batch_is_the_codecs_own_bytes():
    """``--kernels read`` decodes a batch built without the encoder's kernels: it must be
    exactly the batch the codec writes, so that the decoder compiled is the one reads use."""
    import pyarrow as pa

    from seglog.logstore.records.record_codec import encode_batches
    from seglog.warmup import _one_v2_batch

    assert _one_v2_batch() == bytes(encode_batches(pa.array([b"v"]), now_ms=0))
