# cython: language_level=3
"""The compiled twin of :class:`aioaccum._journal.writer.EntryWriter` (same API, same bytes).

Fields are copied straight into the segment's memory map and the CRC-32C is computed in C
(with the SSE 4.2 instruction where the CPU has it), so that journaling a record costs a copy
of its bytes and little else.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from aioaccum._core._ccrc32c cimport aioaccum_crc32c, aioaccum_crc_init

aioaccum_crc_init()

cdef enum:
    ENTRY_HEADER_SIZE = 9
    RECORD = 2
    RECORD_FIXED = 24  # seq, topic id, partition, timestamp


cdef inline unsigned char* _be32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v
    return p + 4


cdef inline unsigned char* _be64(unsigned char* p, uint64_t v) noexcept nogil:
    _be32(p, <uint32_t>(v >> 32))
    _be32(p + 4, <uint32_t>v)
    return p + 8


cdef inline unsigned char* _field(unsigned char* p, const char* data, Py_ssize_t n) noexcept nogil:
    p = _be32(p, <uint32_t><int32_t>n)
    if n > 0:
        memcpy(p, data, n)
        p += n
    return p


def crc32c(data, unsigned int crc=0):
    """CRC-32C of ``data`` continuing from ``crc`` (for the parity tests)."""
    cdef const unsigned char[:] view = data
    if view.shape[0] == 0:
        return crc
    return aioaccum_crc32c(crc, &view[0], view.shape[0])


cdef class EntryWriter:
    # Fields are declared in _cwriter.pxd, so that the compiled journal calls append_record
    # as C, with its numbers unboxed.

    def __init__(self, mm, Py_ssize_t pos, Py_ssize_t size):
        PyObject_GetBuffer(mm, &self._view, PyBUF_WRITABLE)
        self._held = True
        if size > self._view.len:
            self.release()
            raise ValueError(f"writer size {size} exceeds the map's {self._view.len} bytes")
        self._data = <unsigned char*>self._view.buf
        self.pos = pos
        self.size = size

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    def release(self):
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False
            self._data = NULL
            self.size = 0

    cdef void _seal(self, Py_ssize_t pos, Py_ssize_t length, uint8_t kind) noexcept:
        # Header last (see the reference): its CRC covers the kind byte and the payload.
        cdef unsigned char* p = self._data + pos
        cdef uint8_t k = kind
        cdef uint32_t crc = aioaccum_crc32c(0, &k, 1)
        crc = aioaccum_crc32c(crc, p + ENTRY_HEADER_SIZE, length)
        p[8] = kind
        _be32(p + 4, crc)
        _be32(p, <uint32_t>length)

    def append(self, int kind, payload):
        cdef const unsigned char[:] view = payload
        cdef Py_ssize_t n = view.shape[0]
        cdef Py_ssize_t pos = self.pos
        if self._data == NULL or pos + ENTRY_HEADER_SIZE + n > self.size:
            return False
        if n:
            memcpy(self._data + pos + ENTRY_HEADER_SIZE, &view[0], n)
        self._seal(pos, n, <uint8_t>kind)
        self.pos = pos + ENTRY_HEADER_SIZE + n
        return True

    cpdef bint append_record(self, int64_t seq, uint32_t topic_id, int32_t partition,
                             int64_t timestamp, key, value, headers) except -1:
        cdef Py_ssize_t klen = -1 if key is None else PyBytes_GET_SIZE(key)
        cdef Py_ssize_t vlen = -1 if value is None else PyBytes_GET_SIZE(value)
        cdef Py_ssize_t count = len(headers)
        cdef Py_ssize_t size = RECORD_FIXED + 8 + (klen if klen > 0 else 0) \
            + (vlen if vlen > 0 else 0) + 2
        cdef Py_ssize_t i, nlen, hlen
        cdef const char* name
        if count > 0xFFFF:
            raise ValueError(f"a record may have at most 65535 headers, not {count}")
        names = [] if count else None
        for i in range(count):
            h_key, h_value = headers[i]
            encoded = h_key.encode()
            names.append(encoded)
            size += 8 + PyBytes_GET_SIZE(encoded)
            if h_value is not None:
                size += PyBytes_GET_SIZE(h_value)
        cdef Py_ssize_t pos = self.pos
        if self._data == NULL or pos + ENTRY_HEADER_SIZE + size > self.size:
            return False
        cdef unsigned char* p = self._data + pos + ENTRY_HEADER_SIZE
        p = _be64(p, <uint64_t>seq)
        p = _be32(p, topic_id)
        p = _be32(p, <uint32_t>partition)
        p = _be64(p, <uint64_t>timestamp)
        p = _field(p, NULL if key is None else PyBytes_AS_STRING(key), klen)
        p = _field(p, NULL if value is None else PyBytes_AS_STRING(value), vlen)
        p[0] = <uint8_t>(count >> 8)
        p[1] = <uint8_t>count
        p += 2
        for i in range(count):
            encoded = names[i]
            p = _field(p, PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded))
            h_value = headers[i][1]
            if h_value is None:
                p = _field(p, NULL, -1)
            else:
                p = _field(p, PyBytes_AS_STRING(h_value), PyBytes_GET_SIZE(h_value))
        self._seal(pos, size, RECORD)
        self.pos = pos + ENTRY_HEADER_SIZE + size
        return True
