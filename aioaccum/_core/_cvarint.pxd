# cython: language_level=3
"""Kafka's varints (zig-zag, 7 bits a byte) and length-prefixed fields, as inline C for the
compiled encoders (``_crecords.pyx``, ``_carrow.pyx``): one definition, cimported by both."""

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy


cdef inline uint64_t _zigzag(int64_t n) noexcept nogil:
    return (<uint64_t>n << 1) ^ (<uint64_t>0 - <uint64_t>(n < 0))


cdef inline Py_ssize_t _varint_size(uint64_t z) noexcept nogil:
    cdef Py_ssize_t size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


cdef inline unsigned char* _put_varint(unsigned char* p, uint64_t z) noexcept nogil:
    while z >= 0x80:
        p[0] = <unsigned char>((z & 0x7F) | 0x80)
        p += 1
        z >>= 7
    p[0] = <unsigned char>z
    return p + 1


cdef inline Py_ssize_t _field_size(Py_ssize_t length) noexcept nogil:
    """Bytes of a field of ``length`` bytes with its varint length (-1: null, one byte)."""
    if length < 0:
        return 1
    return _varint_size(<uint64_t>length << 1) + length


cdef inline unsigned char* _put_field(
    unsigned char* p, const char* data, Py_ssize_t length
) noexcept nogil:
    if length < 0:
        p[0] = 1  # zig-zag -1: null
        return p + 1
    p = _put_varint(p, <uint64_t>length << 1)
    if length:
        memcpy(p, data, length)
    return p + length
