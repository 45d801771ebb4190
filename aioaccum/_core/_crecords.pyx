"""Compiled twin of :class:`aioaccum._core.records.MemoryRecordsBuilder`.

Design
------
The pure-Python builder in ``records.py`` is the reference: this class has its public API and,
for every valid input, its exact bytes, return values, properties and exceptions, and
``tests/core/test_parity_records.py`` drives the two side by side to keep it so.

Only ``try_append`` (and ``append``, ``has_room_for``, ``is_full``, which share its arithmetic) is
written for speed. When key and value are ``bytes`` or ``None`` and the headers a ``list`` or
``tuple`` of ``(str, bytes | None)`` tuples, the record's size is computed first, the room rule
applied, and the varints, key, value and headers are then written straight into the pooled buffer
(or the spill buffer) with ``memcpy``: no intermediate ``bytes``, no per-record objects beyond
the returned int. Any other argument types take a slow path that runs the same steps as the
Python code, in the same order, so that odd inputs fail with the same exceptions.

The buffers are held exactly as the Python builder holds them: one ``memoryview`` of the buffer
being written (the pooled one, then the spill ``bytearray`` once the records outgrow it), which
pins its size while the builder writes through a pointer taken from it, and is released at
``close``. The pointer is used only for a 1-D, contiguous, writable, unsigned-byte view at least
as long as the builder's capacity; anything else is written through the ``memoryview``, as in
Python. The cold parts (closing, compression, the header and CRC, reading records back) call the
same module-level functions of records.py as the Python builder does.

With incremental allocation (``chunk_size`` above 0) the buffer is the first of a list of pooled
chunks, laid out as one stream: ``_off`` and ``_end`` bound the chunk being written, and
``_data`` points at its first byte. A record that fits the chunk is written through the pointer
as above; one that runs past its end is encoded into a ``bytes`` and copied across the chunks
(``_straddle``), which happens once per chunk, not per record.

One difference is deliberate: timestamps, ``base_timestamp`` and ``write_limit`` are C
``int64_t`` (the batch header's type), so a value that is not an int in that range raises
``TypeError`` or ``OverflowError`` at the call, where the Python builder takes it and fails later
(a timestamp in ``close``) or compares with it as it is (a float ``write_limit``).

Built with ``boundscheck`` and ``wraparound`` off (see setup.py): every index below is either
checked by hand or a non-negative slice bound.
"""

from cpython.buffer cimport PyBuffer_IsContiguous
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_CheckExact, PyByteArray_GET_SIZE
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.exc cimport PyErr_Clear
from cpython.list cimport PyList_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from cpython.number cimport PyNumber_Index
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_CheckExact
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, strcmp
from aioaccum._core._ccrc32c cimport aioaccum_crc32c, aioaccum_crc_init
from aioaccum._core._cgc cimport gc_untrack
from aioaccum._core._cvarint cimport (
    _field_size,
    _put_field,
    _put_varint,
    _varint_size,
    _zigzag,
)

from aioaccum._core import chunks as _chunks
from aioaccum._core.codecs import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionType,
    validate_compression_level,
)


cdef extern from "Python.h":
    # The declaration in cpython.unicode raises; the scan below wants a NULL it can fall back on.
    const char* _utf8_and_size "PyUnicode_AsUTF8AndSize" (object, Py_ssize_t*)


__all__ = ["MemoryRecordsBuilder"]

aioaccum_crc_init()

cdef enum:
    _OVERHEAD = 61  # RECORD_BATCH_OVERHEAD
    _NO_PRODUCER_ID = -1
    _NO_PRODUCER_EPOCH = -1
    _NO_SEQUENCE = -1

# Estimates below this are truncated in C; beyond it (or NaN, inf) Python's int() does it, with
# its exceptions. Far above any batch, and small enough that adding a record size cannot overflow.
cdef double _C_TRUNCATABLE = 4611686018427387904.0  # 2**62


# chunks.next_chunk_size (the rule by which a growing batch sizes its next chunk) again, in C.
# It runs once per chunk, and the Python call (boxed sizes, a module lookup, the bound's loop
# over boxed integers) cost about 1,700 instructions per chunk (callgrind: 4 KB records in
# 16 KiB batches took 40,837 instructions each, 39,559 with this). A cimport would tie this
# module to the compiled chunks module, which the pure-Python run must not need. The parity
# tests compare the chunk sizes both builders ask for, so the two copies cannot drift apart.
cdef Py_ssize_t _LARGEST_CHUNK = _chunks.LARGEST_CHUNK


cdef inline Py_ssize_t _next_chunk_size(
    Py_ssize_t chunk_size, Py_ssize_t capacity, Py_ssize_t short
) noexcept:
    cdef Py_ssize_t largest = chunk_size
    cdef Py_ssize_t size = chunk_size
    while largest * 2 <= _LARGEST_CHUNK:
        largest *= 2
    while size * 2 <= capacity and size < largest:
        size *= 2
    while size < short and size < largest:
        size *= 2
    return size if size >= short else short


# records.py imports this module (through aioaccum._speedups) when it ends, so it cannot be
# imported here at load time; its pure-Python helpers are looked up on first use.
cdef object _records_module = None


cdef object _records():
    global _records_module
    if _records_module is None:
        from aioaccum._core import records

        _records_module = records
    return _records_module


# ----------------------------------------------------------------------------- C encoding

cdef struct _Fields:
    const char* key
    Py_ssize_t key_len  # -1: null
    const char* value
    Py_ssize_t value_len
    Py_ssize_t headers_size  # encoded headers, count varint included




cdef Py_ssize_t _headers_size(object headers) noexcept:
    """Encoded size of ``headers`` if all are of the C-encoded types, else -1."""
    cdef Py_ssize_t count, i, size, length
    cdef PyObject* item
    cdef object name, value
    if not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
        return -1
    count = PySequence_Fast_GET_SIZE(headers)
    size = _varint_size(<uint64_t>count << 1)
    i = 0
    # The size is read again on every turn: the UTF-8 encoding below may allocate, and so run a
    # garbage collection whose finalizers could change a list.
    while i < PySequence_Fast_GET_SIZE(headers):
        item = PySequence_Fast_GET_ITEM(headers, i)
        if not PyTuple_CheckExact(<object>item) or PyTuple_GET_SIZE(<object>item) != 2:
            return -1
        name = <object>PyTuple_GET_ITEM(<object>item, 0)
        value = <object>PyTuple_GET_ITEM(<object>item, 1)
        if not PyUnicode_CheckExact(name) or _utf8_and_size(name, &length) == NULL:
            PyErr_Clear()  # the slow path raises it again, from str.encode as Python does
            return -1
        size += _varint_size(<uint64_t>length << 1) + length
        if value is None:
            size += 1
        elif PyBytes_CheckExact(value):
            size += _field_size(PyBytes_GET_SIZE(value))
        else:
            return -1
        i += 1
    if i != count:
        return -1
    return size


cdef unsigned char* _put_headers(
    unsigned char* p, unsigned char* end, object headers
) noexcept:
    """Write what :func:`_headers_size` measured; NULL if the headers changed in between."""
    cdef Py_ssize_t count = PySequence_Fast_GET_SIZE(headers)  # a list or tuple: measured
    cdef Py_ssize_t i, length
    cdef PyObject* item
    cdef object name, value
    cdef const char* data
    if p + _varint_size(<uint64_t>count << 1) > end:
        return NULL
    p = _put_varint(p, <uint64_t>count << 1)
    i = 0
    while i < count:
        # Everything is checked again: a finalizer run by an allocation between measuring and
        # writing (a spill buffer) could have changed the list, and this writes through a pointer.
        if i >= PySequence_Fast_GET_SIZE(headers):
            return NULL
        item = PySequence_Fast_GET_ITEM(headers, i)
        if not PyTuple_CheckExact(<object>item) or PyTuple_GET_SIZE(<object>item) != 2:
            return NULL
        name = <object>PyTuple_GET_ITEM(<object>item, 0)
        value = <object>PyTuple_GET_ITEM(<object>item, 1)
        if not PyUnicode_CheckExact(name):
            return NULL
        data = _utf8_and_size(name, &length)
        if data == NULL:
            PyErr_Clear()
            return NULL
        if p + _field_size(length) > end:
            return NULL
        p = _put_field(p, data, length)
        if value is None:
            length = -1
            data = NULL
        elif PyBytes_CheckExact(value):
            length = PyBytes_GET_SIZE(value)
            data = PyBytes_AS_STRING(value)
        else:
            return NULL
        if p + _field_size(length) > end:
            return NULL
        p = _put_field(p, data, length)
        i += 1
    return p


cdef inline bint _scan(object key, object value, object headers, _Fields* f) noexcept:
    """Fill ``f`` if every argument has a type the C encoder handles."""
    if key is None:
        f.key = NULL
        f.key_len = -1
    elif PyBytes_CheckExact(key):
        f.key = PyBytes_AS_STRING(key)
        f.key_len = PyBytes_GET_SIZE(key)
    else:
        return False
    if value is None:
        f.value = NULL
        f.value_len = -1
    elif PyBytes_CheckExact(value):
        f.value = PyBytes_AS_STRING(value)
        f.value_len = PyBytes_GET_SIZE(value)
    else:
        return False
    if headers is None or (
        (PyTuple_CheckExact(headers) or PyList_CheckExact(headers))
        and PySequence_Fast_GET_SIZE(headers) == 0
    ):
        f.headers_size = 1
        return True
    f.headers_size = _headers_size(headers)
    return f.headers_size >= 0


cdef inline Py_ssize_t _body_size(int64_t delta, Py_ssize_t offset_delta, _Fields* f) noexcept:
    return (
        1  # attributes
        + _varint_size(_zigzag(delta))
        + _varint_size(<uint64_t>offset_delta << 1)
        + _field_size(f.key_len)
        + _field_size(f.value_len)
        + f.headers_size
    )


cdef inline int64_t _int64(object n) except? -1:
    # Cython's conversion (fast for small ints, OverflowError out of range) is applied only to
    # ints: given anything else it would truncate a float, which Python's builder never takes.
    if PyLong_CheckExact(n):
        return n
    return PyNumber_Index(n)


cdef inline bint _delta_overflows(int64_t timestamp, int64_t base) noexcept nogil:
    return (base < 0 and timestamp > INT64_MAX + base) or (
        base > 0 and timestamp < INT64_MIN + base
    )


cdef bytes _encode_record(object delta, object n, object key, object value, object headers):
    """The Python builder's encoding, for the argument types C does not take."""
    return _records().encode_record(delta, n, key, value, headers)


cdef unsigned char* _put_record(
    unsigned char* p,
    unsigned char* end,
    Py_ssize_t body,
    int64_t delta,
    Py_ssize_t offset_delta,
    _Fields* f,
    object headers,
) noexcept:
    """Write one record of ``end - p`` bytes; NULL if the headers no longer match their size."""
    p = _put_varint(p, <uint64_t>body << 1)
    p[0] = 0  # record attributes, unused
    p = _put_varint(p + 1, _zigzag(delta))
    p = _put_varint(p, <uint64_t>offset_delta << 1)
    p = _put_field(p, f.key, f.key_len)
    p = _put_field(p, f.value, f.value_len)
    if f.headers_size == 1:
        p[0] = 0  # no headers
        p += 1
    else:
        p = _put_headers(p, end, headers)
    if p != end:
        return NULL
    return p


cdef unsigned char* _put_raw(
    unsigned char* p,
    Py_ssize_t body,
    int64_t delta,
    Py_ssize_t offset_delta,
    _Fields* f,
    const unsigned char* headers,
) noexcept nogil:
    """Write one record whose header section is already encoded (NULL: no headers)."""
    p = _put_varint(p, <uint64_t>body << 1)
    p[0] = 0  # record attributes, unused
    p = _put_varint(p + 1, _zigzag(delta))
    p = _put_varint(p, <uint64_t>offset_delta << 1)
    p = _put_field(p, f.key, f.key_len)
    p = _put_field(p, f.value, f.value_len)
    if headers == NULL:
        p[0] = 0
        return p + 1
    memcpy(p, headers, f.headers_size)
    return p + f.headers_size


cdef inline bint _fits(object value, int64_t low, int64_t high) noexcept:
    """Whether ``value`` is an int within ``[low, high]``."""
    cdef int overflow = 0
    cdef long long n
    if not PyLong_CheckExact(value):
        return False
    n = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and low <= n <= high


cdef inline void _put_be(unsigned char* p, uint64_t value, int width) noexcept nogil:
    """``value``'s low ``width`` bytes at ``p``, big-endian (Kafka's byte order)."""
    cdef int i
    for i in range(width - 1, -1, -1):
        p[i] = <unsigned char>value
        value >>= 8


# ---------------------------------------------------------------------------------- builder

cdef object _RELEASED = memoryview(b"")
_RELEASED.release()


cdef class MemoryRecordsBuilder:
    """Builds one v2 record batch in a pooled buffer (Java's ``MemoryRecordsBuilder``).

    The compiled implementation; see :class:`aioaccum._core.records.PyMemoryRecordsBuilder`
    for the documentation of every method and property, which this class shares.
    """

    # Its fields and C methods are declared in _crecords.pxd (the Arrow encoder cimports it).

    def __init__(
        self,
        buffer,
        write_limit,
        compression=CompressionType.NONE,
        compression_level=None,
        base_timestamp=None,
        estimated_ratio=1.0,
        chunk_size=0,
        chunk_source=None,
        chunk_sink=None,
    ):
        self._buffer = buffer
        self._compression = (
            compression if type(compression) is CompressionType else CompressionType(compression)
        )
        self._level = (
            None
            if compression_level is None
            else validate_compression_level(self._compression, compression_level)
        )
        self._codec = self._compression
        self._write_limit = _int64(write_limit)
        self._limit = self._write_limit
        self._base_from_first = base_timestamp is None
        self._base_timestamp = 0 if base_timestamp is None else _int64(base_timestamp)
        self._max_timestamp = -1
        self._est_factor = estimated_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
        self._num_records = 0
        self._pos = _OVERHEAD
        self._data = NULL  # until _point() has checked the new view
        self._view = memoryview(buffer)
        self._capacity = len(buffer)
        self._off = 0
        self._end = self._capacity
        self._ci = 0
        self._point()
        self._spill = None
        self._appends_closed = False
        self._closed = False
        self._out = buffer
        self._size = 0
        self._compression_ratio = 1.0
        self._producer_id = _NO_PRODUCER_ID
        self._producer_epoch = _NO_PRODUCER_EPOCH
        self._base_sequence = _NO_SEQUENCE
        self._is_transactional = False
        self._chunk_size = chunk_size
        self._chunks = None
        self._source = chunk_source
        self._sink = chunk_sink
        self._tail = None
        if self._chunk_size > 0:
            if self._capacity < _OVERHEAD:
                raise ValueError(
                    f"the first chunk holds the {_OVERHEAD}-byte batch header; got "
                    f"{self._capacity} bytes"
                )
            self._chunks = [buffer]
            gc_untrack(self._chunks)
        elif self._capacity < _OVERHEAD:
            self._grow(_OVERHEAD)
        # Out of the collector's lists for its whole life (_cgc.pxd says why).
        gc_untrack(self)

    cdef void _point(self) noexcept:
        """Write through a pointer only where Python's slice assignment would put the same bytes.

        The memoryview keeps the memory alive and its size fixed for as long as it is ``_view``.
        """
        cdef Py_buffer* view = PyMemoryView_GET_BUFFER(self._view)
        if (
            not view.readonly
            and view.ndim == 1
            and view.itemsize == 1
            and (view.format == NULL or strcmp(view.format, b"B") == 0)
            and PyBuffer_IsContiguous(view, b"C")
            and self._end - self._off <= view.len
        ):
            self._data = <unsigned char*>view.buf
        else:
            self._data = NULL

    # ------------------------------------------------------------------------------ appending

    def try_append(self, timestamp, key, value, headers):
        """Append a record if it fits; return its offset delta, or -1 if it was not appended."""
        return self._append(_int64(timestamp), key, value, headers, self._limit)

    def append(self, timestamp, key, value, headers):
        """Append a record without checking ``write_limit``; return its offset delta."""
        if self._appends_closed:
            raise RuntimeError("cannot append: the batch is closed for appends")
        return self._append(_int64(timestamp), key, value, headers, INT64_MAX)

    cdef Py_ssize_t _append(
        self, int64_t timestamp, object key, object value, object headers, int64_t limit
    ) except -2:
        cdef Py_ssize_t n = self._num_records
        cdef Py_ssize_t body, total, pos, end
        cdef int64_t delta
        cdef _Fields f
        cdef unsigned char* start
        cdef bytes record
        if not n:
            if self._appends_closed:
                return -1
            if self._base_from_first:
                self._base_timestamp = timestamp
        if _delta_overflows(timestamp, self._base_timestamp):
            record = _encode_record(
                <object>timestamp - <object>self._base_timestamp, n, key, value, headers
            )
            return self._append_encoded(timestamp, record, limit)
        delta = timestamp - self._base_timestamp
        if not _scan(key, value, headers, &f):
            return self._append_encoded(
                timestamp, _encode_record(delta, n, key, value, headers), limit
            )
        body = _body_size(delta, n, &f)
        total = _varint_size(<uint64_t>body << 1) + body
        pos = self._pos
        end = pos + total
        if not self._make_room(n, timestamp, pos, total, limit):
            return -1
        if self._data != NULL and end <= self._end:
            start = self._data + (pos - self._off)
            if _put_record(start, start + total, body, delta, n, &f, headers) == NULL:
                raise RuntimeError("headers changed while a record was being written")
        else:
            record = PyBytes_FromStringAndSize(NULL, total)
            start = <unsigned char*>PyBytes_AS_STRING(record)
            if _put_record(start, start + total, body, delta, n, &f, headers) == NULL:
                raise RuntimeError("headers changed while a record was being written")
            self._place(pos, end, record)
        self._pos = end
        self._num_records = n + 1
        return n

    cdef Py_ssize_t try_append_raw(
        self,
        int64_t timestamp,
        const char* key,
        Py_ssize_t key_len,
        const char* value,
        Py_ssize_t value_len,
        const unsigned char* headers,
        Py_ssize_t headers_len,
    ) except -2:
        """``try_append`` for a record given as (pointer, length) pairs, -1 length for null,
        and its header section already encoded (count first; NULL for none): for compiled
        callers that read the bytes out of other buffers (Arrow columns). The same room rule,
        bytes and result as ``try_append`` with the same record.

        The pointers must stay valid across the call: taking a chunk may run Python code.
        """
        cdef Py_ssize_t n = self._num_records
        cdef Py_ssize_t body, total, pos, end
        cdef _Fields f
        cdef bytes record
        if not n:
            if self._appends_closed:
                return -1
            if self._base_from_first:
                self._base_timestamp = timestamp
        if _delta_overflows(timestamp, self._base_timestamp):
            raise OverflowError(
                f"timestamp {timestamp} is too far from the batch's base timestamp "
                f"{self._base_timestamp} for a 64-bit delta"
            )
        f.key = key
        f.key_len = key_len
        f.value = value
        f.value_len = value_len
        f.headers_size = 1 if headers == NULL else headers_len
        body = _body_size(timestamp - self._base_timestamp, n, &f)
        total = _varint_size(<uint64_t>body << 1) + body
        pos = self._pos
        end = pos + total
        if not self._make_room(n, timestamp, pos, total, self._limit):
            return -1
        if self._data != NULL and end <= self._end:
            _put_raw(
                self._data + (pos - self._off), body, timestamp - self._base_timestamp, n, &f,
                headers,
            )
        else:
            record = PyBytes_FromStringAndSize(NULL, total)
            _put_raw(
                <unsigned char*>PyBytes_AS_STRING(record), body,
                timestamp - self._base_timestamp, n, &f, headers,
            )
            self._place(pos, end, record)
        self._pos = end
        self._num_records = n + 1
        return n

    cdef Py_ssize_t _append_encoded(
        self, int64_t timestamp, bytes record, int64_t limit
    ) except -2:
        cdef Py_ssize_t n = self._num_records
        cdef Py_ssize_t pos = self._pos
        cdef Py_ssize_t total = PyBytes_GET_SIZE(record)
        if not self._make_room(n, timestamp, pos, total, limit):
            return -1
        if pos + total > self._end:
            self._straddle(pos, record)
        elif self._data != NULL:
            memcpy(self._data + (pos - self._off), PyBytes_AS_STRING(record), total)
        else:
            self._view[pos - self._off : pos + total - self._off] = record
        self._pos = pos + total
        self._num_records = n + 1
        return n

    cdef int _make_room(
        self, Py_ssize_t n, int64_t timestamp, Py_ssize_t pos, Py_ssize_t total, int64_t limit
    ) except -1:
        """Apply the room rule; if the record goes in, update max_timestamp and spill if needed.

        Returns 1 when the record goes in, 0 when it does not.
        """
        cdef double estimate
        if n:
            if self._codec:
                estimate = (pos - _OVERHEAD) * self._est_factor
                if -_C_TRUNCATABLE < estimate < _C_TRUNCATABLE:
                    if _OVERHEAD + <int64_t>estimate + total > limit:
                        return 0
                elif _OVERHEAD + int(<object>estimate) + total > limit:
                    return 0
            elif pos + total > limit:
                return 0
        # Room is made before anything changes: a chunk the pool cannot give refuses the record.
        if pos + total > self._capacity:
            if self._chunks is None:
                self._grow(pos + total)
            elif not self._add_chunks(pos + total):
                return 0
        if not n or timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return 1

    cdef bint _add_chunks(self, Py_ssize_t needed) except -1:
        """Take chunks until the stream holds ``needed`` bytes; False if the pool had none."""
        cdef list chunks = self._chunks
        while self._capacity < needed:
            if self._source is None:
                return False
            chunk = self._source(
                _next_chunk_size(self._chunk_size, self._capacity, needed - self._capacity)
            )
            if chunk is None:
                return False
            chunks.append(chunk)
            self._capacity += len(chunk)
        return True

    cdef int _place(self, Py_ssize_t pos, Py_ssize_t end, bytes record) except -1:
        """Copy an encoded record to ``pos``: into the chunk being written, or across chunks."""
        if end <= self._end:
            self._view[pos - self._off : end - self._off] = record
            return 0
        return self._straddle(pos, record)

    cdef int _straddle(self, Py_ssize_t pos, bytes record) except -1:
        """Write a record that runs past the current chunk, moving on chunk by chunk."""
        cdef list chunks = self._chunks
        cdef Py_ssize_t start = 0
        cdef Py_ssize_t length = PyBytes_GET_SIZE(record)
        cdef Py_ssize_t take
        cdef const char* src = PyBytes_AS_STRING(record)
        data = None
        while True:
            take = min(self._end - pos, length - start)
            if self._data != NULL:
                # Pooled chunks are plain bytearrays: a memcpy, not a slice per piece.
                memcpy(self._data + (pos - self._off), src + start, take)
            else:
                if data is None:
                    data = memoryview(record)
                self._view[pos - self._off : pos - self._off + take] = data[start : start + take]
            pos += take
            start += take
            if start == length:
                return 0
            self._ci += 1
            chunk = chunks[self._ci]
            self._data = NULL
            self._off = self._end
            self._view = memoryview(chunk)
            self._end = self._off + len(chunk)
            self._point()

    def has_room_for(self, timestamp, key, value, headers):
        """Whether :meth:`try_append` would accept this record (Java's ``hasRoomFor``)."""
        cdef Py_ssize_t n, body
        cdef int64_t ts = _int64(timestamp)
        cdef int64_t base = self._base_timestamp
        cdef _Fields f
        if self._appends_closed:
            return False
        n = self._num_records
        if not n:
            return True
        # None headers are no headers to try_append (it tests their truth) but an error to
        # Python's size function (it takes their len): that one runs for them.
        if headers is not None and not _delta_overflows(ts, base) and _scan(
            key, value, headers, &f
        ):
            body = _body_size(ts - base, n, &f)
            size = _varint_size(<uint64_t>body << 1) + body
        else:
            size = _records().record_size_in_bytes(
                n, <object>ts - <object>base, key, value, headers
            )
        return self._estimated_bytes_written() + size <= self._write_limit

    cdef object _estimated_bytes_written(self):
        cdef double estimate
        if self._codec:
            estimate = (self._pos - _OVERHEAD) * self._est_factor
            if -_C_TRUNCATABLE < estimate < _C_TRUNCATABLE:
                return _OVERHEAD + <int64_t>estimate
            return _OVERHEAD + int(<object>estimate)
        return self._pos

    cdef int _grow(self, Py_ssize_t needed) except -1:
        """Move the written bytes to a larger spill buffer; the pooled one is left as it is."""
        cdef Py_ssize_t capacity = max(
            needed, self._capacity + (self._capacity >> 1), <Py_ssize_t>_OVERHEAD
        )
        cdef Py_ssize_t kept = min(self._pos, self._capacity)
        spill = bytearray(capacity)
        spill[:kept] = self._view[:kept]
        self._spill = spill
        self._data = NULL
        self._view = memoryview(spill)
        self._capacity = capacity
        self._end = capacity
        self._point()
        return 0

    def set_estimated_compression_ratio(self, ratio):
        """Replace the compression-ratio estimate used by the room checks."""
        self._est_factor = ratio * COMPRESSION_RATE_ESTIMATION_FACTOR

    # ------------------------------------------------------------------------------- closing

    def close_for_record_appends(self):
        """Refuse further appends, without building the batch yet."""
        self._appends_closed = True
        self._limit = -1

    def set_producer_state(self, producer_id, producer_epoch, base_sequence, is_transactional=False):
        """Set the idempotence/transaction fields of the header (rewritten if already closed)."""
        _records().validate_producer_state(
            producer_id, producer_epoch, base_sequence, is_transactional
        )
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._is_transactional = is_transactional
        if self._closed and self._num_records:
            self._write_header()

    def close(self):
        """Finish the batch: compress if configured, then write the header and CRC."""
        if self._closed:
            return
        self.close_for_record_appends()
        if not self._num_records:
            self._release()
            self._out = self._buffer
            self._size = 0
            self._closed = True
            if self._chunks is not None:
                _chunks.trim(self._chunks, 1, self._sink)
            return
        pos = self._pos
        if self._chunks is not None:
            self._release()
            if self._codec:
                self._size, self._tail, self._compression_ratio = _chunks.compress_chunks(
                    self._compression, self._level, self._chunks, pos
                )
            else:
                self._size = pos
            _chunks.trim(self._chunks, self._size, self._sink)
            self._closed = True
            self._write_header()
            return
        if self._codec:
            out, size, self._compression_ratio = _records().compress_records(
                self._compression, self._level, self._view, pos, self._buffer
            )
            self._spill = None
        else:
            out = self._buffer if self._spill is None else self._spill
            size = pos
        # Drop the export that pinned the buffer's size; the bytes are final from here on.
        self._release()
        self._out = out
        self._size = size
        self._closed = True
        self._write_header()

    cdef void _release(self) except *:
        self._data = NULL
        self._view.release()
        # Dropped now rather than with the batch, which may wait in flight for seconds, the
        # view and its buffer tracked by the collector. A released view stands in, so that a
        # misuse raises what the reference raises.
        self._view = _RELEASED

    cdef _write_header(self):
        out = self._out
        if (
            PyByteArray_CheckExact(out)
            and PyByteArray_GET_SIZE(out) >= _OVERHEAD
            and (self._chunks is not None or PyByteArray_GET_SIZE(out) >= self._size)
            and _fits(self._producer_id, INT64_MIN, INT64_MAX)
            and _fits(self._producer_epoch, -32768, 32767)
            and _fits(self._base_sequence, -2147483648, 2147483647)
        ):
            self._write_header_c(out)
            return
        # Anything else (a value out of range included) through the reference, with its errors.
        _records().write_batch_header(
            self._out,
            self._size,
            self._compression,
            self._is_transactional,
            self._num_records,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            None if self._chunks is None else self._parts(),
        )

    def build(self):
        """Close if needed and return a view of exactly the batch's bytes (chunked: joined)."""
        self.close()
        if self._chunks is None:
            return memoryview(self._out)[: self._size]
        batch_parts = self._parts()
        return batch_parts[0] if len(batch_parts) == 1 else memoryview(_chunks.joined(batch_parts))

    def build_parts(self):
        """Close if needed and return the batch's bytes as the buffers that hold them."""
        self.close()
        if self._chunks is None:
            return [memoryview(self._out)[: self._size]]
        return self._parts()

    cdef int _write_header_c(self, bytearray out) except -1:
        """records.write_batch_header, in C: with many partitions a batch holds a few records,
        and packing the header through ``struct`` cost more than appending them."""
        cdef unsigned char* p = <unsigned char*>PyByteArray_AS_STRING(out)
        cdef int attributes = self._codec | (0x10 if self._is_transactional else 0)
        cdef int64_t producer_id = self._producer_id
        cdef int producer_epoch = self._producer_epoch
        cdef int base_sequence = self._base_sequence
        cdef uint32_t crc
        _put_be(p, 0, 8)  # base offset: the broker assigns offsets
        _put_be(p + 8, <uint64_t>(self._size - 12), 4)  # batchLength leaves out the first 12
        _put_be(p + 12, <uint64_t><uint32_t>-1, 4)  # partition leader epoch: none
        p[16] = 2  # magic
        _put_be(p + 21, <uint64_t>attributes, 2)
        _put_be(p + 23, <uint64_t>(self._num_records - 1), 4)  # last offset delta
        _put_be(p + 27, <uint64_t>self._base_timestamp, 8)
        _put_be(p + 35, <uint64_t>self._max_timestamp, 8)
        _put_be(p + 43, <uint64_t>producer_id, 8)
        _put_be(p + 51, <uint64_t><uint32_t>producer_epoch, 2)
        _put_be(p + 53, <uint64_t><uint32_t>base_sequence, 4)
        _put_be(p + 57, <uint64_t>self._num_records, 4)
        # The CRC goes in last: it covers everything from the attributes on.
        if self._chunks is None:
            crc = aioaccum_crc32c(0, p + 21, self._size - 21)
        else:
            crc = self._chunks_crc()
        _put_be(p + 17, crc, 4)
        return 0

    cdef uint32_t _chunks_crc(self) except? 0:
        """The CRC from byte 21 of the stream over the chunks (and the compressed tail),
        read in place: no view of any chunk is made."""
        cdef uint32_t crc = 0
        cdef Py_ssize_t left = self._size
        cdef Py_ssize_t start = 21
        cdef Py_ssize_t n
        cdef const unsigned char[::1] tail
        for chunk in self._chunks:
            if left <= 0:
                break
            if not PyByteArray_CheckExact(chunk):
                return _chunks.crc_of_parts(self._parts(), 21)
            n = min(PyByteArray_GET_SIZE(chunk), left)
            crc = aioaccum_crc32c(
                crc, <const unsigned char*>PyByteArray_AS_STRING(chunk) + start, n - start
            )
            left -= n
            start = 0
        if self._tail is not None:
            tail = self._tail
            if tail.shape[0]:
                crc = aioaccum_crc32c(crc, &tail[0], tail.shape[0])
        return crc

    cdef list _parts(self):
        if not self._size:
            return [memoryview(self._buffer)[:0]]
        batch_parts = _chunks.parts(self._chunks, self._size)
        if self._tail is not None:
            batch_parts.append(memoryview(self._tail))
        return batch_parts

    # ------------------------------------------------------------------------------- reading

    def iter_records(self):
        """Yield the appended records in order, decoded from the written bytes."""
        if self._chunks is not None:
            if self._closed:
                if not self._size:
                    return
                section = _records().closed_section(
                    self._compression, _chunks.joined(self._parts()), self._size
                )
            else:
                section = _chunks.joined(_chunks.parts(self._chunks, self._pos), _OVERHEAD)
        elif self._closed:
            if not self._size:
                return
            section = _records().closed_section(self._compression, self._out, self._size)
        else:
            section = bytes(self._view[_OVERHEAD : self._pos])
        yield from _records().decode_records(section, self._num_records, self._base_timestamp)

    # ---------------------------------------------------------------------------- properties

    @property
    def buffer(self):
        """The pooled buffer given at construction (return this one to the pool)."""
        return self._buffer

    @property
    def chunks(self):
        """Every pooled buffer the batch holds: the one given at construction, or the chunks."""
        return [self._buffer] if self._chunks is None else list(self._chunks)

    @property
    def compression(self):
        """The batch's codec."""
        return self._compression

    @property
    def write_limit(self):
        """The size appends are checked against (``batch_size``)."""
        return self._write_limit

    @property
    def num_records(self):
        """Records appended so far."""
        return self._num_records

    @property
    def base_timestamp(self):
        """The timestamp deltas are relative to (0 before the first record, if none was given)."""
        return self._base_timestamp

    @property
    def max_timestamp(self):
        """Largest record timestamp (-1 before the first record)."""
        return self._max_timestamp

    @property
    def uncompressed_size(self):
        """Header plus records before compression (Java's ``uncompressedBytesWritten``)."""
        return self._pos

    @property
    def estimated_size_in_bytes(self):
        """Exact size once closed; before that, the (estimated, if compressed) size so far."""
        return self._size if self._closed else self._estimated_bytes_written()

    @property
    def compression_ratio(self):
        """Compressed / uncompressed records size after :meth:`close` (1.0 until then)."""
        return self._compression_ratio

    @property
    def is_full(self):
        """Closed for appends, or holding records and at or over ``write_limit`` (estimated)."""
        cdef double estimate
        if self._appends_closed:
            return True
        if not self._num_records:
            return False
        if self._codec:
            estimate = (self._pos - _OVERHEAD) * self._est_factor
            if -_C_TRUNCATABLE < estimate < _C_TRUNCATABLE:
                return self._write_limit <= _OVERHEAD + <int64_t>estimate
            return self._write_limit <= _OVERHEAD + int(<object>estimate)
        return self._write_limit <= self._pos

    @property
    def is_closed(self):
        """Whether :meth:`close` has built the batch."""
        return self._closed

    @property
    def producer_id(self):
        """Producer id in the header (-1 without idempotence)."""
        return self._producer_id

    @property
    def producer_epoch(self):
        """Producer epoch in the header (-1 without idempotence)."""
        return self._producer_epoch

    @property
    def base_sequence(self):
        """Sequence number of the first record (-1 without idempotence)."""
        return self._base_sequence

    @property
    def is_transactional(self):
        """Whether the transactional attribute bit is set."""
        return self._is_transactional

    def __repr__(self):
        state = "closed" if self._closed else "full" if self.is_full else "open"
        return (
            f"<MemoryRecordsBuilder {state} records={self._num_records} "
            f"bytes={self.estimated_size_in_bytes} limit={self._write_limit} "
            f"compression={self._compression.kafka_name}>"
        )
