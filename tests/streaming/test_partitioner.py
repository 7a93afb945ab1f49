"""Kafka's default partitioner: murmur2 checked against Kafka's own test vectors and
against kafka-python's independent implementation on many random keys."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from seglog.streaming.partitioner import (
    assign_partitions,
    murmur2,
    murmur2_array,
    partitions_for_keys,
)

# From Kafka's UtilsTest.testMurmur2 (Java, signed int32 results).
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
}



@pytest.mark.parametrize(("data", "expected"), list(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_vectorised_murmur2_equals_kafka_python_on_random_keys() -> None:
    rng = np.random.default_rng(7)
    keys = [rng.bytes(int(n)) for n in rng.integers(0, 80, size=5000)]
    ours = murmur2_array(pa.array(keys, pa.binary()))
    theirs = np.array([kafka_python_murmur2(k) for k in keys], dtype=np.int64)
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours.astype(np.int64) & 0xFFFFFFFF, theirs)


def test_partition_for_key_matches_kafka_python_placement() -> None:
    rng = np.random.default_rng(11)
    keys = [f"user-{i}".encode() + rng.bytes(int(rng.integers(0, 9))) for i in range(3000)]
    for n in (1, 3, 7, 64):
        expected = [(kafka_python_murmur2(k) & 0x7FFFFFFF) % n for k in keys]
        got = partitions_for_keys(pa.array(keys), n)
        assert got.tolist() == expected


def test_string_large_binary_and_sliced_arrays_hash_their_bytes() -> None:
    words = ["alpha", "beta", "γάμμα", "", "delta-epsilon"]
    expected = [murmur2(w.encode()) for w in words]
    assert murmur2_array(pa.array(words, pa.string())).tolist() == expected
    assert murmur2_array(pa.array(words, pa.large_string())).tolist() == expected
    large = pa.array([w.encode() for w in words], pa.large_binary())
    assert murmur2_array(large).tolist() == expected
    assert murmur2_array(pa.array(words).slice(2, 2)).tolist() == expected[2:4]
    assert murmur2_array(pa.array(words, pa.string_view())).tolist() == expected
    chunked = pa.chunked_array([words[:2], words[2:]])
    assert murmur2_array(chunked).tolist() == expected


def test_null_keys_are_keyless_and_spread_by_value_deterministically() -> None:
    keys = pa.array([b"k1", None, b"k2", None, None], pa.binary())
    values = pa.array([b"v0", b"v1", b"v2", b"v3", b"v1"], pa.binary())
    first = assign_partitions(keys, values, 16)
    second = assign_partitions(keys, values, 16)
    np.testing.assert_array_equal(first, second)
    assert first[0] == (kafka_python_murmur2(b"k1") & 0x7FFFFFFF) % 16
    assert first[2] == (kafka_python_murmur2(b"k2") & 0x7FFFFFFF) % 16
    # Equal values land together whatever their row position.
    assert first[1] == first[4] == (kafka_python_murmur2(b"v1") & 0x7FFFFFFF) % 16
    assert first[3] == (kafka_python_murmur2(b"v3") & 0x7FFFFFFF) % 16


def test_keyless_placement_does_not_depend_on_row_order_or_split() -> None:
    values = pa.array([f"event-{i}".encode() for i in range(2000)])
    whole = assign_partitions(None, values, 5)
    order = np.random.default_rng(3).permutation(2000)
    shuffled = assign_partitions(None, values.take(pa.array(order)), 5)
    np.testing.assert_array_equal(shuffled, whole[order])
    halves = np.concatenate([assign_partitions(None, values.slice(0, 777), 5),
                             assign_partitions(None, values.slice(777), 5)])
    np.testing.assert_array_equal(halves, whole)
    # And the spread is reasonable: every partition gets a fair share.
    counts = np.bincount(whole, minlength=5)
    assert counts.min() > 300


def test_per_row_partition_counts() -> None:
    keys = pa.array([b"a", b"a", b"a"])
    counts = np.array([1, 2, 1000])
    h = kafka_python_murmur2(b"a") & 0x7FFFFFFF
    assert partitions_for_keys(keys, counts).tolist() == [0, h % 2, h % 1000]


def test_rejects_non_binary_arrays() -> None:
    with pytest.raises(TypeError, match="binary or string"):
        murmur2_array(pa.array([1, 2, 3]))
