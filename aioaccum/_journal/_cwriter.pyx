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

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    static uint32_t aioaccum_crc_table[8][256];
    static int aioaccum_crc_hw = 0;

    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static void aioaccum_crc_zeros_init(void);
    #endif

    static void aioaccum_crc_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            aioaccum_crc_table[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = aioaccum_crc_table[0][n];
            for (int k = 1; k < 8; k++) {
                c = aioaccum_crc_table[0][c & 0xFF] ^ (c >> 8);
                aioaccum_crc_table[k][n] = c;
            }
        }
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        aioaccum_crc_hw = __builtin_cpu_supports("sse4.2");
        aioaccum_crc_zeros_init();
    #endif
    }

    static uint32_t aioaccum_crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
        crc = ~crc;
        while (n >= 8) {
            uint64_t w;
            __builtin_memcpy(&w, p, 8);  /* little-endian x86/arm64 */
            uint32_t lo = (uint32_t)w ^ crc, hi = (uint32_t)(w >> 32);
            crc = aioaccum_crc_table[7][lo & 0xFF] ^ aioaccum_crc_table[6][(lo >> 8) & 0xFF]
                ^ aioaccum_crc_table[5][(lo >> 16) & 0xFF] ^ aioaccum_crc_table[4][lo >> 24]
                ^ aioaccum_crc_table[3][hi & 0xFF] ^ aioaccum_crc_table[2][(hi >> 8) & 0xFF]
                ^ aioaccum_crc_table[1][(hi >> 16) & 0xFF] ^ aioaccum_crc_table[0][hi >> 24];
            p += 8; n -= 8;
        }
        while (n--) crc = aioaccum_crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        return ~crc;
    }

    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* The crc32 instruction takes 3 cycles and depends on the one before: one stream of
       8-byte words runs at a third of the unit's speed. So blocks of 3 x STRIDE bytes run as
       three independent streams, and the three results are joined with the "STRIDE zero
       bytes" operator (a CRC register is linear in its input: the register after A then B is
       the register after A advanced over len(B) zeros, xor the register of B from 0). */
    #define AIOACCUM_STRIDE 256
    static uint32_t aioaccum_crc_zeros[4][256];  /* a register advanced over STRIDE zeros */

    static uint32_t aioaccum_crc_advance(uint32_t c, size_t zeros) {
        while (zeros--) c = aioaccum_crc_table[0][c & 0xFF] ^ (c >> 8);
        return c;
    }

    static void aioaccum_crc_zeros_init(void) {
        for (int k = 0; k < 4; k++)
            for (uint32_t v = 0; v < 256; v++)
                aioaccum_crc_zeros[k][v] = aioaccum_crc_advance(v << (8 * k), AIOACCUM_STRIDE);
    }

    static inline uint32_t aioaccum_crc_shift(uint32_t c) {
        return aioaccum_crc_zeros[0][c & 0xFF] ^ aioaccum_crc_zeros[1][(c >> 8) & 0xFF]
            ^ aioaccum_crc_zeros[2][(c >> 16) & 0xFF] ^ aioaccum_crc_zeros[3][c >> 24];
    }

    __attribute__((target("sse4.2")))
    static uint32_t aioaccum_crc_hw32(uint32_t crc, const unsigned char *p, size_t n) {
        uint64_t c = ~crc;
        while (n >= 3 * AIOACCUM_STRIDE) {
            uint64_t c1 = 0, c2 = 0, w0, w1, w2;
            for (int i = 0; i < AIOACCUM_STRIDE; i += 8) {
                __builtin_memcpy(&w0, p + i, 8);
                __builtin_memcpy(&w1, p + AIOACCUM_STRIDE + i, 8);
                __builtin_memcpy(&w2, p + 2 * AIOACCUM_STRIDE + i, 8);
                c = __builtin_ia32_crc32di(c, w0);
                c1 = __builtin_ia32_crc32di(c1, w1);
                c2 = __builtin_ia32_crc32di(c2, w2);
            }
            c = aioaccum_crc_shift((uint32_t)c) ^ (uint32_t)c1;
            c = aioaccum_crc_shift((uint32_t)c) ^ (uint32_t)c2;
            p += 3 * AIOACCUM_STRIDE; n -= 3 * AIOACCUM_STRIDE;
        }
        while (n >= 8) {
            uint64_t w;
            __builtin_memcpy(&w, p, 8);
            c = __builtin_ia32_crc32di(c, w);
            p += 8; n -= 8;
        }
        uint32_t c32 = (uint32_t)c;
        while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
        return ~c32;
    }
    #endif

    static uint32_t aioaccum_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (aioaccum_crc_hw) return aioaccum_crc_hw32(crc, p, n);
    #endif
        return aioaccum_crc_sw(crc, p, n);
    }
    """
    void aioaccum_crc_init() nogil
    uint32_t aioaccum_crc32c(uint32_t crc, const unsigned char* p, size_t n) nogil

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
