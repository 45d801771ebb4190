# Kafka's murmur2 in C, for the compiled partitioner (partitioner.pxd) and the planner of Arrow
# rows (_carrow.pyx): an inline function, so this file builds no module of its own.
from libc.stdint cimport int32_t, uint32_t


cdef inline int32_t murmur2_at(const unsigned char* data, Py_ssize_t length) noexcept nogil:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), over ``length`` bytes at ``data``."""
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = <uint32_t>0x9747B28C
    cdef uint32_t k
    cdef Py_ssize_t whole = length & ~3
    cdef Py_ssize_t i = 0
    h ^= <uint32_t>length
    while i < whole:
        k = (
            <uint32_t>data[i] | (<uint32_t>data[i + 1] << 8) | (<uint32_t>data[i + 2] << 16)
            | (<uint32_t>data[i + 3] << 24)
        )
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
        i += 4
    i = length - whole
    if i == 3:
        h ^= <uint32_t>data[whole + 2] << 16
    if i >= 2:
        h ^= <uint32_t>data[whole + 1] << 8
    if i >= 1:
        h ^= <uint32_t>data[whole]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return <int32_t>h
