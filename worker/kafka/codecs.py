"""Which compression codecs this process's kafka-python can decode, and the start-up self-check.

kafka-python decodes gzip with the standard library; snappy, lz4 and zstd batches need optional
libraries (its `snappy`, `lz4`, `zstd` extras) and raise UnsupportedCodecError from `poll` without
them. CRC-32C, checked on every fetched batch, runs in pure Python unless the `crc32c` package is
installed: about 3 MB/s, a ceiling for large records. The checks below ask kafka-python itself
(`kafka.codec.has_*`, `kafka.record.util`), so they see exactly what its decoder will use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Codec:
    name: str      # as Kafka's compression.type calls it
    module: str    # what kafka-python 3.0 imports to decode it
    package: str   # the PyPI distribution that provides it


CODECS = (Codec("gzip", "gzip", "(standard library)"),
          Codec("snappy", "snappy", "python-snappy"),
          Codec("lz4", "lz4.frame", "lz4"),
          Codec("zstd", "zstandard", "zstandard"))
CRC32C = Codec("crc32c", "crc32c", "crc32c")


class MissingCodecError(RuntimeError):
    """A compression codec's library is missing: batches compressed with it cannot be consumed."""


def missing_codecs() -> list[Codec]:
    """The codecs kafka-python cannot decode in this process."""
    from kafka import codec

    return [c for c in CODECS if not getattr(codec, f"has_{c.name}")()]


def native_crc32c() -> bool:
    """True when kafka-python checks batch CRCs with the `crc32c` C extension."""
    from kafka.record import _crc32c, util

    return util.calc_crc32c.__defaults__[0] is not _crc32c.crc


def check_codecs(allow_missing: bool) -> None:
    """The start-up self-check. Logs what is missing; raises MissingCodecError when a codec is
    missing and `allow_missing` is false (the install is broken: these are dependencies of telesum)."""
    if not native_crc32c():
        log.warning("kafka-python checks CRC-32C in pure Python (about 3 MB/s of consumed records): "
                    "pip install %s", CRC32C.package)
    missing = missing_codecs()
    if not missing:
        log.info("compression codecs: %s all decodable", ", ".join(c.name for c in CODECS))
        return
    names = ", ".join(f"{c.name} (module {c.module!r}, pip install {c.package})" for c in missing)
    if not allow_missing:
        raise MissingCodecError(
            f"kafka-python cannot decode {names}: a batch compressed with it would stop its partition. "
            "Install it, or start anyway with --allow-missing-codecs (TELESUM_ALLOW_MISSING_CODECS=true)")
    log.warning("kafka-python cannot decode %s; starting anyway (--allow-missing-codecs): a partition "
                "holding such a batch is paused at it and reported stuck on /readyz", names)


class BatchTooLarge(Exception):
    """A compressed batch expands beyond the worker's limit (`max_batch_bytes`): decompression stopped
    there, nothing of it was materialised whole."""

    def __init__(self, codec: str, limit: int) -> None:
        super().__init__(f"a {codec} batch expands beyond {limit:,} bytes (max_batch_bytes); not decompressed further")
        self.codec, self.limit = codec, limit


_READ_CHUNK = 1 << 20


def _read_bounded(reader, codec: str, limit: int) -> bytes:
    """Everything `reader.read(n)` gives until it ends; BatchTooLarge once it passes `limit` bytes."""
    out = bytearray()
    while chunk := reader.read(min(_READ_CHUNK, limit + 1 - len(out))):
        out += chunk
        if len(out) > limit:
            raise BatchTooLarge(codec, limit)
    return bytes(out)


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its preamble, a little-endian varint)."""
    length = shift = 0
    for byte in block[:5]:
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
    return length


def bounded_decoders(limit: int) -> dict[str, Callable[[bytes], bytes]]:
    """kafka-python's four batch decoders, each refusing to expand a batch beyond `limit` bytes."""
    import gzip
    import io
    import struct

    def gzip_decode(payload) -> bytes:
        with gzip.GzipFile(fileobj=io.BytesIO(payload), mode="rb") as reader:
            return _read_bounded(reader, "gzip", limit)

    def zstd_decode(payload) -> bytes:
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(payload), read_across_frames=True) as reader:
            return _read_bounded(reader, "zstd", limit)

    def lz4_decode(payload) -> bytes:
        import lz4.frame

        decompressor = lz4.frame.LZ4FrameDecompressor()
        out = bytearray(decompressor.decompress(bytes(payload), max_length=_READ_CHUNK))
        while len(out) <= limit and not decompressor.eof and not decompressor.needs_input:
            out += decompressor.decompress(b"", max_length=_READ_CHUNK)
        if len(out) > limit:
            raise BatchTooLarge("lz4", limit)
        return bytes(out)

    def snappy_decode(payload) -> bytes:
        import snappy

        payload = bytes(payload)
        if payload[:8] != _XERIAL_MAGIC:
            blocks = [payload]
        else:  # xerial framing: 16 bytes of header, then (4-byte big-endian size, raw block)*
            blocks, cursor = [], 16
            while cursor < len(payload):
                (size,) = struct.unpack_from("!i", payload, cursor)
                blocks.append(payload[cursor + 4:cursor + 4 + size])
                cursor += 4 + size
        if sum(_snappy_length(block) for block in blocks) > limit:
            raise BatchTooLarge("snappy", limit)
        return b"".join(snappy.decompress(block) for block in blocks)

    return {"gzip_decode": gzip_decode, "zstd_decode": zstd_decode, "lz4_decode": lz4_decode,
            "snappy_decode": snappy_decode}


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def limit_batch_size(limit: int) -> None:
    """Make kafka-python's record readers decompress batches through `bounded_decoders(limit)`.

    kafka-python decompresses a fetched batch whole (and copies it once more): a few MB of gzip on
    the input topic would grow to gigabytes in this process. Its record modules bind the decoders
    at import, so they are replaced there. Process-wide; the last call's limit holds."""
    from kafka import codec
    from kafka.record import default_records, legacy_records

    for name, decode in bounded_decoders(limit).items():
        decode.bounded = True
        for module in (default_records, legacy_records):
            current = getattr(module, name, None)
            # kafka-python's own, or ours with another limit; one put there by someone else (a test's
            # damaged frame) stays
            if current is not None and (current is getattr(codec, name) or getattr(current, "bounded", False)):
                setattr(module, name, decode)
