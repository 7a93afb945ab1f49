"""Kafka's record compression codecs, by codec id, framed exactly as Kafka frames them.

A compressed v2 batch holds its records section as one compressed stream; a compressed
legacy (magic 0/1) wrapper holds an inner message set as its value. The framing of each
codec follows Kafka's Java clients:

- gzip (1): a plain RFC 1952 stream (readers accept concatenated members).
- snappy (2): written with xerial's block framing (``82 'SNAPPY' 00``, version 1,
  compat 1, then ``[int32 length][raw snappy block]`` for every 32 KiB of input), as
  snappy-java's ``SnappyOutputStream`` does; read both xerial-framed and raw snappy.
- lz4 (3): an LZ4 frame with independent 64 KB blocks, no content size, no checksums
  (Kafka's ``KafkaLZ4BlockOutputStream``). Magic-0 data was written by brokers before
  KIP-57 with a header checksum computed over the wrong bytes, so for magic 0 the frame
  is parsed by hand and that checksum ignored.
- zstd (4): standard frames; the content size may be absent (zstd-jni streams omit it),
  so decoding is always streaming.

Thread-safe: every function is pure (compressor objects are created per call or are
themselves stateless).

Example::

    >>> decompress(CODEC_LZ4, compress(CODEC_LZ4, b"abc" * 100)) == b"abc" * 100
    True
"""

from __future__ import annotations

import gzip
import logging
import struct
import zlib

import lz4.block
import lz4.frame
import snappy
import zstandard

from ..errors import CorruptRecordError
from .record_format import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_SNAPPY,
    CODEC_ZSTD,
)

logger = logging.getLogger(__name__)


# Kafka's defaults (KIP-390): gzip uses Deflater's default level, zstd level 3. For
# lz4 Kafka uses high-compression level 9; seglog keeps lz4's fast mode because the
# codec exists for speed and any conforming reader accepts either.
GZIP_LEVEL = 6
ZSTD_LEVEL = 3

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` (any buffer) with Kafka codec id ``codec`` (1-4)."""
    if codec == CODEC_GZIP:
        # mtime=0 keeps the output deterministic, as Java's GZIPOutputStream does.
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec == CODEC_SNAPPY:
        return _snappy_xerial_compress(data)
    if codec == CODEC_LZ4:
        # lz4 ships no type information: the annotation states what it returns.
        framed: bytes = lz4.frame.compress(
            data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
            store_size=False, content_checksum=False)
        return framed
    if codec == CODEC_ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    raise ValueError(f"unknown compression codec id {codec} (expected 1-4)")


def decompress(codec: int, data: bytes | bytearray | memoryview, *, magic: int = 2) -> bytes:
    """Decompress ``data`` written with Kafka codec id ``codec`` inside a batch of the
    given ``magic``. Raises CorruptRecordError when the bytes are not a valid stream."""
    try:
        if codec == CODEC_GZIP:
            return gzip.decompress(data)
        if codec == CODEC_SNAPPY:
            return _snappy_decompress(data)
        if codec == CODEC_LZ4:
            if magic == 0:
                return _lz4_frame_decompress_lenient(data)
            unframed: bytes = lz4.frame.decompress(data)
            return unframed
        if codec == CODEC_ZSTD:
            if magic < 2:
                raise CorruptRecordError(f"zstd is not allowed in magic {magic} messages")
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except (OSError, EOFError, RuntimeError, ValueError, zlib.error, lz4.block.LZ4BlockError,
            zstandard.ZstdError, snappy.UncompressError) as exc:
        raise CorruptRecordError(
            f"cannot decompress {CODEC_NAMES.get(codec, codec)} data "
            f"({len(data)} bytes): {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec id {codec}")


def _snappy_xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data).cast("B")
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = snappy.compress(bytes(view[start:start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data).cast("B")
    # Only the 8-byte magic is checked: some producers write version/compat wrongly
    # (little-endian), and every Kafka client tolerates it.
    if len(view) < 16 or bytes(view[:8]) != XERIAL_HEADER[:8]:
        # snappy ships no type information either.
        raw: bytes = snappy.uncompress(bytes(view))
        return raw
    parts = []
    pos = 16
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"xerial snappy stream truncated at byte {pos}")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError(
                f"xerial snappy block at byte {pos - 4} claims {size} bytes, "
                f"{end - pos} remain")
        parts.append(snappy.uncompress(bytes(view[pos:pos + size])))
        pos += size
    return b"".join(parts)


def _zstd_decompress(data: bytes | bytearray | memoryview) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    with reader:
        return reader.readall()


def _lz4_frame_decompress_lenient(data: bytes | bytearray | memoryview) -> bytes:
    """Read an LZ4 frame without checking its header checksum (KIP-57: brokers before
    0.10 computed it over the magic too). Block and content checksums are skipped."""
    view = memoryview(data).cast("B")
    if len(view) < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic")
    flg = view[4]
    bd = view[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"unsupported LZ4 frame version {flg >> 6}")
    block_checksum = bool(flg & 0x10)
    has_content_size = bool(flg & 0x08)
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
    if block_max is None:
        raise CorruptRecordError(f"invalid LZ4 block size code in descriptor byte {bd:#x}")
    pos = 6 + (8 if has_content_size else 0) + 1  # descriptor, content size, checksum
    parts = []
    end = len(view)
    while True:
        if end - pos < 4:
            raise CorruptRecordError(f"lz4 frame truncated at byte {pos}")
        (word,) = _UINT32_LE.unpack_from(view, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        if pos + size > end:
            raise CorruptRecordError(f"lz4 block at byte {pos - 4} overruns the frame")
        block = bytes(view[pos:pos + size])
        if word & 0x80000000:
            parts.append(block)
        else:
            parts.append(lz4.block.decompress(block, uncompressed_size=block_max))
        pos += size + (4 if block_checksum else 0)
    return b"".join(parts)
