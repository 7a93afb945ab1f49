"""compression: Kafka's framing of each codec, read back by kafka-python's own codecs."""

from __future__ import annotations

import os
import struct

import lz4.frame
import pytest
import snappy
from kafka import codec as kafka_codec

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.records.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    XERIAL_BLOCK_SIZE,
    compress,
    decompress,
)

PAYLOADS = [b"", b"a", b"hello kafka " * 1000, os.urandom(100_000),
            b"".join(i.to_bytes(4, "big") for i in range(50_000))]

KAFKA_PYTHON_DECODERS = {
    CODEC_GZIP: kafka_codec.gzip_decode,
    CODEC_SNAPPY: kafka_codec.snappy_decode,
    CODEC_LZ4: kafka_codec.lz4_decode,
    CODEC_ZSTD: kafka_codec.zstd_decode,
}


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
@pytest.mark.parametrize("index", range(len(PAYLOADS)))
def test_roundtrip_and_kafka_python_reads_it(codec, index):
    data = PAYLOADS[index]
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    if not (codec == CODEC_SNAPPY and not data):  # kafka-python needs > 16 xerial bytes
        assert KAFKA_PYTHON_DECODERS[codec](packed) == data


def test_snappy_is_xerial_framed_in_32k_blocks():
    data = os.urandom(3 * XERIAL_BLOCK_SIZE + 10)
    packed = compress(CODEC_SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        blocks.append(snappy.uncompress(packed[pos + 4:pos + 4 + size]))
        pos += 4 + size
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE] * 3 + [10]
    assert packed == kafka_codec.snappy_encode(data)


def test_snappy_reads_raw_unframed_blocks():
    data = b"raw snappy " * 100
    assert decompress(CODEC_SNAPPY, snappy.compress(data)) == data


def test_snappy_reads_xerial_with_little_endian_version_fields():
    data = b"redpanda " * 100
    packed = bytearray(compress(CODEC_SNAPPY, data))
    packed[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(CODEC_SNAPPY, bytes(packed)) == data


def test_lz4_frame_has_independent_64k_blocks_and_no_content_size():
    packed = compress(CODEC_LZ4, os.urandom(200_000))
    info = lz4.frame.get_frame_info(packed)
    assert info["block_size_id"] == 4  # 64 KB
    assert not info["block_linked"]
    assert info["content_size"] == 0
    assert not info["content_checksum"]


def test_lz4_magic0_ignores_the_wrong_header_checksum():
    data = b"pre KIP-57 " * 5000
    packed = bytearray(compress(CODEC_LZ4, data))
    hc_pos = 6  # magic(4) FLG BD, no content size
    packed[hc_pos] ^= 0x5A  # what an 0.8/0.9 broker wrote: a checksum over other bytes
    assert decompress(CODEC_LZ4, bytes(packed), magic=0) == data
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(CODEC_LZ4, bytes(packed), magic=1)


def test_lz4_magic0_reader_handles_content_size_and_checksums():
    data = os.urandom(70_000) + b"z" * 70_000
    packed = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                block_linked=False, store_size=True, content_checksum=True,
                                block_checksum=True)
    assert decompress(CODEC_LZ4, packed, magic=0) == data


def test_lz4_magic0_garbage_block_is_a_corrupt_record_error():
    block = b"\xff" * 8
    frame = (b"\x04\x22\x4d\x18" + bytes([0x40, 0x40, 0x00]) + struct.pack("<I", len(block))
             + block + struct.pack("<I", 0))
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(CODEC_LZ4, frame, magic=0)


def test_zstd_without_content_size_decodes_as_a_stream():
    import zstandard

    data = b"zstd streaming " * 10_000
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert not zstandard.get_frame_parameters(packed).has_checksum
    assert decompress(CODEC_ZSTD, packed) == data
    # two frames back to back, as a stream written in pieces may hold
    two = packed + zstandard.ZstdCompressor().compress(b"tail")
    assert decompress(CODEC_ZSTD, two) == data + b"tail"


def test_zstd_is_refused_for_legacy_magic():
    with pytest.raises(CorruptRecordError, match="zstd"):
        decompress(CODEC_ZSTD, compress(CODEC_ZSTD, b"x"), magic=1)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_garbage_raises_corrupt_record_error(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff"
                   if codec == CODEC_SNAPPY else b"this is not compressed data at all")


def test_unknown_codec():
    with pytest.raises(ValueError, match="unknown compression codec id 7"):
        compress(7, b"x")
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 7"):
        decompress(7, b"x")
