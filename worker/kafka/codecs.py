"""Which compression codecs this process's kafka-python can decode, and the start-up self-check.

kafka-python decodes gzip with the standard library; snappy, lz4 and zstd batches need optional
libraries (its `snappy`, `lz4`, `zstd` extras) and raise UnsupportedCodecError from `poll` without
them. CRC-32C, checked on every fetched batch, runs in pure Python unless the `crc32c` package is
installed: about 3 MB/s, a ceiling for large records. The checks below ask kafka-python itself
(`kafka.codec.has_*`, `kafka.record.util`), so they see exactly what its decoder will use.
"""

from __future__ import annotations

import logging
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
