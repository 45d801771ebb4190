"""Compression codecs of Kafka record batches, and the per-topic compression-ratio estimator.

The bytes each codec writes are what the Java client writes for magic v2, so Java brokers and
consumers (and aiokafka, kafka-python, librdkafka) read them:

* gzip: one gzip member (zlib's header: mtime 0, so output is deterministic).
* snappy: xerial's block framing, as ``org.xerial.snappy.SnappyOutputStream`` writes it: a
  16-byte magic header, then blocks of at most 32 KiB of input, each a big-endian int32 length
  followed by raw snappy. Kafka consumers do not read the snappy "framing format" stream.
* lz4: a standard LZ4 frame with independent 64 KiB blocks, no block or content checksum and no
  content size (Java's ``Lz4BlockOutputStream``, KIP-57).
* zstd: one zstd frame.

lz4 is a required dependency; snappy (``cramjam``) and zstd (``zstandard``) are extras that are
imported only when used, and a missing one is reported as :class:`ConfigError` naming the extra.

Compression levels follow Kafka's ``compression.<codec>.level`` settings (KIP-390): gzip 1..9 or
-1 (zlib's default), lz4 1..17 (default 9), zstd -131072..22 (default 3); snappy has no level.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from aioaccum.errors import ConfigError

__all__ = [
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
    "BytesLike",
    "CompressionRatioEstimator",
    "CompressionType",
    "compress",
    "decompress",
    "ensure_codec_available",
    "gzip_compress",
    "gzip_decompress",
    "lz4_compress",
    "lz4_compressor",
    "lz4_decompress",
    "snappy_compress",
    "snappy_decompress",
    "validate_compression_level",
    "zstd_compress",
    "zstd_decompress",
]

BytesLike = bytes | bytearray | memoryview


class CompressionType(enum.IntEnum):
    """Codec ids as stored in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Look a codec up by its Kafka name (``"none"``, ``"gzip"``, ``"snappy"``, ...).

        Raises:
            ConfigError: ``name`` is not a codec Kafka knows.
        """
        try:
            return cls[name.strip().upper()]
        except (KeyError, AttributeError):
            choices = ", ".join(repr(c.kafka_name) for c in cls)
            raise ConfigError(f"compression_type {name!r} is not one of: {choices}") from None

    @property
    def kafka_name(self) -> str:
        """The name Kafka uses in ``compression.type`` (lower case)."""
        return self.name.lower()


# Java's MemoryRecordsBuilder inflates the estimated compressed size by 5% so that batches
# rarely end up above batch_size after compression.
COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05

_EXTRA = {CompressionType.SNAPPY: "snappy", CompressionType.ZSTD: "zstd"}
_MODULE = {
    CompressionType.SNAPPY: "cramjam",
    CompressionType.LZ4: "lz4.frame",
    CompressionType.ZSTD: "zstandard",
}
# (min, max, default) per Kafka's CompressionType; gzip also accepts -1 (zlib's default).
_LEVELS: dict[CompressionType, tuple[int, int, int]] = {
    CompressionType.GZIP: (1, 9, -1),
    CompressionType.LZ4: (1, 17, 9),
    CompressionType.ZSTD: (-131072, 22, 3),
}
_GZIP_DEFAULT = -1
_LZ4_DEFAULT = 9


def _import(compression: CompressionType) -> Any:
    import importlib

    name = _MODULE[compression]
    try:
        module: ModuleType = importlib.import_module(name)
    except ImportError:
        package = name.split(".")[0]
        extra = _EXTRA.get(compression)
        hint = f"pip install 'aioaccum[{extra}]'" if extra else f"pip install {package}"
        raise ConfigError(
            f"compression_type {compression.kafka_name!r} needs the {package!r} package: {hint}"
        ) from None
    return module


def ensure_codec_available(compression: CompressionType) -> None:
    """Check at configuration time that the library behind ``compression`` is installed.

    Raises:
        ConfigError: The library is missing; the message names the extra to install.
    """
    if compression in _MODULE:
        _import(compression)


def validate_compression_level(compression: CompressionType, level: int | None) -> int | None:
    """Check ``level`` against the range Kafka allows for ``compression``.

    Args:
        compression: The codec.
        level: The requested level, or ``None`` for the codec's default.

    Returns:
        ``level`` unchanged (``None`` stays ``None``).

    Raises:
        ConfigError: The level is out of range, not an int, or given for a codec without levels.
    """
    if level is None:
        return None
    if isinstance(level, bool) or not isinstance(level, int):
        raise ConfigError(f"compression_level must be an int, got {level!r}")
    limits = _LEVELS.get(compression)
    if limits is None:
        raise ConfigError(
            f"compression_type {compression.kafka_name!r} has no compression level "
            f"(got compression_level={level}); levels exist for gzip, lz4 and zstd"
        )
    low, high, default = limits
    if not (low <= level <= high or level == default):
        extra = f" or {default}" if not low <= default <= high else ""
        raise ConfigError(
            f"compression_level {level} is out of range for {compression.kafka_name!r}: "
            f"must be between {low} and {high}{extra}"
        )
    return level


# ---------------------------------------------------------------------------------------- gzip


def gzip_compress(data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` into one gzip member (mtime 0, so equal input gives equal output)."""
    compressor = zlib.compressobj(_GZIP_DEFAULT if level is None else level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def gzip_decompress(data: BytesLike) -> bytes:
    """Decompress one gzip member."""
    return zlib.decompress(data, 31)


# -------------------------------------------------------------------------------------- snappy

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def snappy_compress(data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` in xerial's framing (header, then length-prefixed raw blocks)."""
    del level  # snappy has no levels; the parameter keeps the codec signatures uniform
    snappy = _import(CompressionType.SNAPPY).snappy
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_decompress(data: BytesLike) -> bytes:
    """Decompress xerial-framed snappy, or a bare raw snappy block (as librdkafka writes)."""
    snappy = _import(CompressionType.SNAPPY).snappy
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_HEADER[:8]:
        return bytes(snappy.decompress_raw(view))
    parts = []
    pos = len(_XERIAL_HEADER)
    end = len(view)
    while pos < end:
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise ValueError("truncated xerial snappy block")
        parts.append(bytes(snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)


# ----------------------------------------------------------------------------------------- lz4


def lz4_compress(data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` into one LZ4 frame the way Kafka's Java client does.

    Kafka's default level (9) uses the fast compressor, as Java's ``Lz4BlockOutputStream`` does;
    any other level uses high compression (lz4.frame's HC levels start at 3 and stop at 16, so
    levels outside that band are clamped into it).
    """
    frame = _import(CompressionType.LZ4)
    compressed: bytes = frame.compress(
        data,
        compression_level=_lz4_hc_level(frame, level),
        block_size=frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    return compressed


def lz4_compressor(level: int | None = None) -> Any:
    """A streaming compressor (``lz4.frame.LZ4FrameCompressor``) of the frame
    :func:`lz4_compress` makes: its blocks are independent, so ``begin()``, then ``compress()``
    of the data in pieces, then ``flush()`` give the same bytes as one call over the whole."""
    frame = _import(CompressionType.LZ4)
    return frame.LZ4FrameCompressor(
        block_size=frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        compression_level=_lz4_hc_level(frame, level),
        content_checksum=False,
        block_checksum=False,
        auto_flush=False,
    )


def _lz4_hc_level(frame: Any, level: int | None) -> int:
    """lz4.frame's level for Kafka's: 0 (the fast compressor) for the default, else clamped
    into lz4.frame's high-compression band."""
    if level is None or level == _LZ4_DEFAULT:
        return 0
    hc_level: int = min(max(level, frame.COMPRESSIONLEVEL_MINHC), frame.COMPRESSIONLEVEL_MAX)
    return hc_level


def lz4_decompress(data: BytesLike) -> bytes:
    """Decompress one LZ4 frame."""
    decompressed: bytes = _import(CompressionType.LZ4).decompress(data)
    return decompressed


# ---------------------------------------------------------------------------------------- zstd

# zstandard's (de)compressor objects are costly to create and must not be shared between
# threads (a sync facade or several producers may run loops in different threads).
_zstd_local = threading.local()


def zstd_compress(data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` into one zstd frame (Kafka's default level is 3)."""
    zstandard = _import(CompressionType.ZSTD)
    level = 3 if level is None else level
    cache: dict[int, Any] | None = getattr(_zstd_local, "compressors", None)
    if cache is None:
        cache = _zstd_local.compressors = {}
    compressor = cache.get(level)
    if compressor is None:
        compressor = cache[level] = zstandard.ZstdCompressor(level=level)
    compressed: bytes = compressor.compress(data)
    return compressed


def zstd_decompress(data: BytesLike) -> bytes:
    """Decompress zstd frames, whether or not they record their content size."""
    zstandard = _import(CompressionType.ZSTD)
    decompressor = getattr(_zstd_local, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    # Streaming frames (as Java writes them) carry no content size, which the one-shot
    # decompress() refuses; the stream reader copes with both.
    with decompressor.stream_reader(data, read_across_frames=True) as reader:
        out: bytes = reader.read()
    return out


_COMPRESS: dict[CompressionType, Callable[[BytesLike, int | None], bytes]] = {
    CompressionType.GZIP: gzip_compress,
    CompressionType.SNAPPY: snappy_compress,
    CompressionType.LZ4: lz4_compress,
    CompressionType.ZSTD: zstd_compress,
}
_DECOMPRESS: dict[CompressionType, Callable[[BytesLike], bytes]] = {
    CompressionType.GZIP: gzip_decompress,
    CompressionType.SNAPPY: snappy_decompress,
    CompressionType.LZ4: lz4_decompress,
    CompressionType.ZSTD: zstd_decompress,
}


def compress(compression: CompressionType, data: BytesLike, level: int | None = None) -> bytes:
    """Compress a batch's records section with ``compression`` at ``level``.

    Raises:
        ConfigError: The codec's library is not installed.
        ValueError: ``compression`` is ``NONE``.
    """
    try:
        codec = _COMPRESS[compression]
    except KeyError:
        raise ValueError(f"no compressor for {compression!r}") from None
    return codec(data, level)


def decompress(compression: CompressionType, data: BytesLike) -> bytes:
    """Decompress a records section written with ``compression``.

    Raises:
        ConfigError: The codec's library is not installed.
        ValueError: ``compression`` is ``NONE``.
    """
    try:
        codec = _DECOMPRESS[compression]
    except KeyError:
        raise ValueError(f"no decompressor for {compression!r}") from None
    return codec(data)


# --------------------------------------------------------------------------------- estimation


class CompressionRatioEstimator:
    """Learns, per topic and codec, how well batches compress (Java's CompressionRatioEstimator).

    Estimates start at 1.0 (no gain). After each closed batch the estimate moves toward the
    observed ratio: down by a small fixed step when a batch compressed better than expected, and
    up by at least a larger step when it compressed worse, so that an under-estimate (batches
    overflowing ``batch_size``) is corrected quickly and an over-estimate slowly. Unlike Java's,
    the table belongs to one producer rather than to the whole process.
    """

    IMPROVING_STEP = 0.005
    DETERIORATING_STEP = 0.05
    INITIAL = 1.0

    __slots__ = ("_ratios",)

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, CompressionType], float] = {}

    def estimation(self, topic: str, compression: CompressionType) -> float:
        """Return the current estimate of compressed size / uncompressed size."""
        return self._ratios.get((topic, compression), self.INITIAL)

    def update_estimation(
        self, topic: str, compression: CompressionType, observed_ratio: float
    ) -> float:
        """Fold one closed batch's ratio into the estimate and return the new estimate."""
        key = (topic, compression)
        current = self._ratios.get(key, self.INITIAL)
        if observed_ratio > current:
            current = max(current + self.DETERIORATING_STEP, observed_ratio)
        elif observed_ratio < current:
            # Java steps down unconditionally and may undershoot; stopping at the observed ratio
            # converges on it instead.
            current = max(current - self.IMPROVING_STEP, observed_ratio)
        self._ratios[key] = current
        return current

    def set_estimation(self, topic: str, compression: CompressionType, ratio: float) -> None:
        """Overwrite the estimate (for tests and warm starts)."""
        self._ratios[(topic, compression)] = ratio

    def reset_estimation(self, topic: str) -> None:
        """Forget what was learnt about ``topic`` (all codecs)."""
        for key in [k for k in self._ratios if k[0] == topic]:
            del self._ratios[key]

    remove_estimation = reset_estimation
