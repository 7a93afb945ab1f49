from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.logstore.cleaner.offset_map import ENTRY_BYTES, OffsetMap, hash_keys

_MASK = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def murmur3_x64_128_reference(data: bytes) -> tuple[int, int]:
    """Straight from the algorithm's description, in plain integers."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = 0
    n = len(data) // 16
    for i in range(n):
        k1 = int.from_bytes(data[16 * i:16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8:16 * i + 16], "little")
        k1 = (_rotl((k1 * c1) & _MASK, 31) * c2) & _MASK
        h1 ^= k1
        h1 = (_rotl(h1, 27) + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        k2 = (_rotl((k2 * c2) & _MASK, 33) * c1) & _MASK
        h2 ^= k2
        h2 = (_rotl(h2, 31) + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[16 * n:]
    k1 = int.from_bytes(tail[:8], "little")
    k2 = int.from_bytes(tail[8:], "little")
    if len(tail) > 8:
        h2 ^= (_rotl((k2 * c2) & _MASK, 33) * c1) & _MASK
    if len(tail) > 0:
        h1 ^= (_rotl((k1 * c1) & _MASK, 31) * c2) & _MASK
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return h1, h2


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def test_hash_matches_reference_for_every_tail_length():
    rnd = random.Random(7)
    keys = [bytes(rnd.getrandbits(8) for _ in range(n)) for n in range(0, 70)]
    hashes, valid = hash_keys(pa.array(keys, type=pa.binary()))
    assert valid.all()
    for key, (a, b) in zip(keys, hashes.tolist(), strict=True):
        ra, rb = murmur3_x64_128_reference(key)
        assert (a, b) == (_signed(ra), _signed(rb)), key


def test_hash_of_sliced_large_and_string_arrays_equals_binary():
    keys = [b"alpha", b"", b"beta-longer-than-sixteen-bytes", b"\xff\x00"]
    base, _ = hash_keys(pa.array(keys, type=pa.binary()))
    large, _ = hash_keys(pa.array(keys, type=pa.large_binary()))
    assert (base == large).all()
    sliced, _ = hash_keys(pa.array([b"x"] + keys, type=pa.binary()).slice(1))
    assert (base == sliced).all()
    text, _ = hash_keys(pa.array(["alpha", "", "beta-longer-than-sixteen-bytes"]))
    assert (text == base[:3]).all()


def test_null_keys_are_invalid_and_never_stored():
    m = OffsetMap(4096)
    keys = pa.array([b"a", None, b"a"], type=pa.binary())
    assert m.put(keys, np.array([5, 6, 7])) == 3
    assert m.size == 1
    assert m.get(keys).tolist() == [7, -1, 7]


def test_capacity_follows_the_memory_budget():
    m = OffsetMap(24_000, load_factor=0.5)
    assert m.slots == 1000
    assert m.capacity == 500
    assert m.memory_bytes == 1000 * ENTRY_BYTES <= 24_000
    with pytest.raises(ValueError, match="dedupe.buffer.size"):
        OffsetMap(2 * ENTRY_BYTES - 1)
    tiny = OffsetMap(2 * ENTRY_BYTES, load_factor=1.0)
    assert tiny.capacity == 1
    tiny.put(pa.array([b"a"]), np.array([0]))
    assert tiny.get(pa.array([b"b"])).tolist() == [-1]  # terminates on a nearly full table


def test_put_stops_at_the_first_new_key_past_capacity():
    m = OffsetMap(ENTRY_BYTES * 10, load_factor=0.3)  # 3 keys
    keys = pa.array([b"a", b"b", b"a", b"c", b"b", b"d", b"a"])
    consumed = m.put(keys, np.arange(10, 17))
    assert consumed == 5  # "d" at index 5 would be the fourth key
    assert m.size == 3 and m.full
    assert m.latest_offset == 14
    assert m.get(pa.array([b"a", b"b", b"c", b"d"])).tolist() == [12, 14, 13, -1]
    # an existing key still fits in a full map, a new one does not
    assert m.put(pa.array([b"c", b"e"]), np.array([20, 21])) == 1
    assert m.latest_offset == 20
    m.clear()
    assert m.size == 0 and m.latest_offset == -1
    assert m.get(pa.array([b"a"])).tolist() == [-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=300),
       st.integers(min_value=2, max_value=400))
def test_map_equals_a_dict_on_the_prefix_it_accepted(keys, slots):
    m = OffsetMap(slots * ENTRY_BYTES, load_factor=0.9)
    offsets = np.arange(1000, 1000 + len(keys))
    consumed = m.put(pa.array(keys, type=pa.binary()), offsets)
    model: dict[bytes, int] = {}
    for k, o in zip(keys[:consumed], offsets[:consumed].tolist(), strict=True):
        model[k] = o
    assert m.size == len(model) <= m.capacity
    if consumed < len(keys):
        assert keys[consumed] not in model and len(model) == m.capacity
    probe = list(model) + [b"never-put-" + bytes([i]) for i in range(5)]
    got = m.get(pa.array(probe, type=pa.binary())).tolist()
    assert got == [model.get(k, -1) for k in probe]


def test_many_keys_in_several_calls():
    rnd = np.random.default_rng(3)
    ids = rnd.integers(0, 50_000, size=200_000)
    keys = pa.array([b"key-%d" % i for i in ids.tolist()], type=pa.binary())
    m = OffsetMap(4 << 20)
    for start in range(0, len(ids), 30_000):
        chunk = keys.slice(start, 30_000)
        assert m.put(chunk, np.arange(start, start + len(chunk))) == len(chunk)
    latest = np.full(50_000, -1)
    latest[ids] = np.arange(len(ids))  # numpy keeps the last write per index
    got = m.get(keys)
    assert (got == latest[ids]).all()
    assert m.size == len(np.unique(ids))
