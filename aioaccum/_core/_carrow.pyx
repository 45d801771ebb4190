"""Compiled twin of :class:`aioaccum._core.arrow.ArrowRows`: Arrow buffers straight to records.

Design
------
``arrow.py`` is the reference (its docstring says what the class does); this one has its API
and, for every input, its plan, bytes and errors. The columns come checked and normalized by
:func:`aioaccum._core.arrow.arrow_columns`; this class keeps them (their buffers stay alive as
long as it does) and reads them through pointers taken from ``pyarrow.Buffer.address``:

* binary columns as validity bitmap, offsets (32- or 64-bit) and data, with the array's offset;
* the ``partition`` and topic-index columns as int32 with their validity;
* headers as list offsets into flattened name and value columns.

Planning is two passes over the rows in C: each row's group (topic, partition choice; murmur2
is Kafka's, over the key bytes where they lie), then a stable counting sort into ``_order``
(position -> row) and its inverse. Appending reads a row's key and value spans, encodes its
headers (if any) into a scratch buffer, and hands the pointers to the compiled builder's
``try_append_raw``. No Python object is made per row, except by :meth:`record`, which the
caller uses once per new batch.

Built with ``boundscheck`` and ``wraparound`` off (see setup.py): positions and rows are checked
against the row count by hand where they come from Python.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from aioaccum._core._crecords cimport MemoryRecordsBuilder
from aioaccum._core._cvarint cimport _field_size, _put_field, _put_varint, _varint_size

from aioaccum._core._cmurmur2 cimport murmur2_at
from aioaccum._core.partitioner import checked_partition
from aioaccum._core.records import MAX_RECORD_OVERHEAD, RECORD_BATCH_OVERHEAD

__all__ = ["ArrowRows"]

cdef Py_ssize_t _RUN_BOUND = MAX_RECORD_OVERHEAD + 10
cdef Py_ssize_t _BATCH_BOUND = RECORD_BATCH_OVERHEAD + MAX_RECORD_OVERHEAD
cdef const char* _EMPTY = b""


cdef struct _Binary:
    const unsigned char* valid  # NULL: no nulls
    const char* offsets  # NULL: the column is absent (every row null)
    const char* data
    Py_ssize_t offset
    bint wide  # 64-bit offsets


cdef struct _Int32:
    const unsigned char* valid
    const int32_t* values  # NULL: absent
    Py_ssize_t offset


cdef inline const void* _address(object buffer):
    if buffer is None:
        return NULL
    return <const void*><uintptr_t>buffer.address


cdef bint _binary(_Binary* c, object array) except -1:
    if array is None:
        c.offsets = NULL
        return True
    buffers = array.buffers()
    c.valid = <const unsigned char*>_address(buffers[0]) if array.null_count else NULL
    c.offsets = <const char*>_address(buffers[1])
    c.data = <const char*>_address(buffers[2])
    if c.data == NULL:
        c.data = _EMPTY  # every value empty: no data buffer
    c.offset = array.offset
    c.wide = buffers[1] is not None and str(array.type).startswith("large_")
    return True


cdef bint _int32(_Int32* c, object array) except -1:
    if array is None:
        c.values = NULL
        return True
    buffers = array.buffers()
    c.valid = <const unsigned char*>_address(buffers[0]) if array.null_count else NULL
    c.values = <const int32_t*>_address(buffers[1])
    c.offset = array.offset
    return True


cdef inline bint _is_valid(const unsigned char* valid, Py_ssize_t j) noexcept nogil:
    return valid == NULL or (valid[j >> 3] >> (j & 7)) & 1


cdef inline Py_ssize_t _span(_Binary* c, Py_ssize_t i, const char** data) noexcept nogil:
    """Row ``i``'s bytes: their length (and ``data`` set), or -1 for null."""
    cdef Py_ssize_t j = c.offset + i
    cdef int64_t a, b
    if c.offsets == NULL or not _is_valid(c.valid, j):
        data[0] = NULL
        return -1
    if c.wide:
        a = (<const int64_t*>c.offsets)[j]
        b = (<const int64_t*>c.offsets)[j + 1]
    else:
        a = (<const int32_t*>c.offsets)[j]
        b = (<const int32_t*>c.offsets)[j + 1]
    data[0] = c.data + a
    return <Py_ssize_t>(b - a)


cdef inline int32_t _get(_Int32* c, Py_ssize_t i, bint* present) noexcept nogil:
    cdef Py_ssize_t j = c.offset + i
    if c.values == NULL or not _is_valid(c.valid, j):
        present[0] = False
        return 0
    present[0] = True
    return c.values[j]


cdef class ArrowRows:
    """The rows of one call, planned onto partitions and appended by position (compiled)."""

    cdef public list topics
    cdef object _keep  # the normalized columns: they own the buffers read below
    cdef Py_ssize_t _rows
    cdef _Binary _key
    cdef _Binary _value
    cdef _Binary _hname
    cdef _Binary _hvalue
    cdef const unsigned char* _hvalid
    cdef Py_ssize_t _hvalid_offset  # the list array's own offset, for its validity
    cdef const char* _hoffsets  # NULL: no headers column
    cdef Py_ssize_t _hoffset
    cdef bint _hwide
    cdef _Int32 _topic
    cdef _Int32 _partition
    cdef int64_t* _order  # position -> row
    cdef int64_t* _position  # row -> position
    cdef unsigned char* _scratch  # one row's encoded headers
    cdef Py_ssize_t _scratch_size

    def __cinit__(self):
        self._order = NULL
        self._position = NULL
        self._scratch = NULL
        self._scratch_size = 0

    def __dealloc__(self):
        free(self._order)
        free(self._position)
        free(self._scratch)

    def __init__(self, columns):
        cdef Py_ssize_t i
        self._keep = columns
        self.topics = list(columns.topics)
        self._rows = columns.num_rows
        _binary(&self._value, columns.value)
        _binary(&self._key, columns.key)
        self._hoffsets = NULL
        if columns.headers is not None:
            headers = columns.headers
            offsets = columns.header_offsets
            self._hvalid = (
                <const unsigned char*>_address(headers.buffers()[0])
                if headers.null_count else NULL
            )
            self._hoffsets = <const char*>_address(offsets.buffers()[1])
            self._hoffset = offsets.offset
            self._hwide = str(offsets.type) == "int64"
            self._hvalid_offset = headers.offset
            _binary(&self._hname, columns.header_keys)
            _binary(&self._hvalue, columns.header_values)
        _int32(&self._topic, columns.topic_ids)
        _int32(&self._partition, columns.partition)
        self._order = <int64_t*>malloc(max(self._rows, 1) * sizeof(int64_t))
        self._position = <int64_t*>malloc(max(self._rows, 1) * sizeof(int64_t))
        if self._order == NULL or self._position == NULL:
            raise MemoryError()
        for i in range(self._rows):
            self._order[i] = i
            self._position[i] = i

    def __len__(self):
        return self._rows

    # ------------------------------------------------------------------------------ headers

    cdef inline Py_ssize_t _header_range(self, Py_ssize_t row, Py_ssize_t* first) noexcept nogil:
        """How many headers ``row`` has (``first`` set to the first one's index)."""
        cdef Py_ssize_t j
        cdef int64_t a, b
        if self._hoffsets == NULL or not _is_valid(self._hvalid, self._hvalid_offset + row):
            return 0
        j = self._hoffset + row
        if self._hwide:
            a = (<const int64_t*>self._hoffsets)[j]
            b = (<const int64_t*>self._hoffsets)[j + 1]
        else:
            a = (<const int32_t*>self._hoffsets)[j]
            b = (<const int32_t*>self._hoffsets)[j + 1]
        first[0] = <Py_ssize_t>a
        return <Py_ssize_t>(b - a)

    cdef Py_ssize_t _headers_size(self, Py_ssize_t row) noexcept nogil:
        """The encoded header section's size, count included."""
        cdef Py_ssize_t first = 0, count, h, size
        cdef const char* data
        count = self._header_range(row, &first)
        size = _varint_size(<uint64_t>count << 1)
        for h in range(first, first + count):
            size += _field_size(_span(&self._hname, h, &data))
            size += _field_size(_span(&self._hvalue, h, &data))
        return size

    cdef const unsigned char* _encode_headers(self, Py_ssize_t row, Py_ssize_t* size) except? NULL:
        """``row``'s header section in the scratch buffer, or NULL if it has no headers."""
        cdef Py_ssize_t first = 0, count, h, length
        cdef const char* data
        cdef unsigned char* p
        cdef void* grown
        count = self._header_range(row, &first)
        if not count:
            size[0] = 1
            return NULL
        size[0] = self._headers_size(row)
        if size[0] > self._scratch_size:
            grown = realloc(self._scratch, size[0])
            if grown == NULL:
                raise MemoryError()
            self._scratch = <unsigned char*>grown
            self._scratch_size = size[0]
        p = _put_varint(self._scratch, <uint64_t>count << 1)
        for h in range(first, first + count):
            length = _span(&self._hname, h, &data)
            p = _put_field(p, data, length)
            length = _span(&self._hvalue, h, &data)
            p = _put_field(p, data, length)
        return self._scratch

    # ------------------------------------------------------------------------------- checks

    def first_too_large(self, Py_ssize_t limit):
        """The upper-bound size of the first record over ``limit``, or -1 if none is."""
        cdef Py_ssize_t row, size
        cdef const char* data
        for row in range(self._rows):
            size = (
                _BATCH_BOUND + _field_size(_span(&self._key, row, &data))
                + _field_size(_span(&self._value, row, &data)) + self._headers_size(row)
            )
            if size > limit:
                return size
        return -1

    # ------------------------------------------------------------------------------ planning

    def plan(self, partition_counts, bint ignore_keys):
        """See :meth:`aioaccum._core.arrow.ArrowRows.plan`."""
        cdef Py_ssize_t topics = len(self.topics)
        cdef Py_ssize_t row, g, width, groups_count, length
        cdef int64_t count, choice, topic
        cdef int32_t explicit
        cdef bint present
        cdef const char* data
        cdef int64_t* group_of = NULL
        cdef int64_t* starts = NULL
        cdef list counts = [int(c) for c in partition_counts]
        width = max([c for c in counts] or [0]) + 1  # choice -1 (sticky) .. max - 1
        groups_count = topics * width
        group_of = <int64_t*>malloc(max(self._rows, 1) * sizeof(int64_t))
        starts = <int64_t*>malloc((groups_count + 1) * sizeof(int64_t))
        if group_of == NULL or starts == NULL:
            free(group_of)
            free(starts)
            raise MemoryError()
        try:
            for g in range(groups_count + 1):
                starts[g] = 0
            for row in range(self._rows):
                present = False
                topic = _get(&self._topic, row, &present) if self._topic.values != NULL else 0
                count = counts[topic]
                explicit = _get(&self._partition, row, &present)
                if present:
                    if explicit < 0 or explicit >= count:
                        checked_partition(self.topics[topic], explicit, range(count))
                    choice = explicit
                else:
                    length = _span(&self._key, row, &data)
                    if length >= 0 and not ignore_keys:
                        choice = (
                            murmur2_at(<const unsigned char*>data, length) & 0x7FFFFFFF
                        ) % count
                    else:
                        choice = -1
                g = topic * width + choice + 1
                group_of[row] = g
                starts[g + 1] += 1
            for g in range(groups_count):
                starts[g + 1] += starts[g]
            result = []
            for g in range(groups_count):
                if starts[g + 1] > starts[g]:
                    result.append((g // width, g % width - 1, starts[g], starts[g + 1]))
            for row in range(self._rows):
                g = group_of[row]
                self._order[starts[g]] = row
                self._position[row] = starts[g]
                starts[g] += 1
            return result
        finally:
            free(group_of)
            free(starts)

    # ----------------------------------------------------------------------------- appending

    def append_to(
        self, MemoryRecordsBuilder builder, int64_t timestamp, Py_ssize_t start, Py_ssize_t stop
    ):
        """Append positions ``[start, stop)`` until the builder is full; how many went in."""
        cdef Py_ssize_t position, row, key_len, value_len, headers_len = 1
        cdef const char* key
        cdef const char* value
        cdef const unsigned char* headers
        if start < 0 or stop > self._rows:
            raise IndexError(f"positions {start}..{stop} out of range for {self._rows} rows")
        position = start
        while position < stop:
            row = self._order[position]
            key_len = _span(&self._key, row, &key)
            value_len = _span(&self._value, row, &value)
            headers = self._encode_headers(row, &headers_len)
            if builder.try_append_raw(
                timestamp, key, key_len, value, value_len, headers, headers_len
            ) < 0:
                break
            position += 1
        return position - start

    def size_of(self, Py_ssize_t start, Py_ssize_t stop):
        """What positions ``[start, stop)`` count towards stickiness (as ``append_run``)."""
        cdef Py_ssize_t position, row, length
        cdef int64_t size = (stop - start) * _RUN_BOUND
        cdef const char* data
        if start < 0 or stop > self._rows:
            raise IndexError(f"positions {start}..{stop} out of range for {self._rows} rows")
        for position in range(start, stop):
            row = self._order[position]
            length = _span(&self._key, row, &data)
            if length > 0:
                size += length
            length = _span(&self._value, row, &data)
            if length > 0:
                size += length
        return size

    # ------------------------------------------------------------------------------ per row

    cdef object _bytes(self, _Binary* c, Py_ssize_t row):
        cdef const char* data
        cdef Py_ssize_t length = _span(c, row, &data)
        return None if length < 0 else PyBytes_FromStringAndSize(data, length)

    cdef Py_ssize_t _row(self, Py_ssize_t row) except -1:
        if not 0 <= row < self._rows:
            raise IndexError(f"row {row} out of range for {self._rows} rows")
        return row

    def record(self, Py_ssize_t position):
        """One position's key, value and headers, as ``send()`` takes them."""
        cdef Py_ssize_t row, first = 0, count, h, length
        cdef const char* data
        row = self._order[self._row(position)]
        headers = []
        count = self._header_range(row, &first)
        for h in range(first, first + count):
            length = _span(&self._hname, h, &data)
            headers.append(
                (PyUnicode_DecodeUTF8(data, length, NULL), self._bytes(&self._hvalue, h))
            )
        return self._bytes(&self._key, row), self._bytes(&self._value, row), headers

    def position_of(self, Py_ssize_t row):
        return self._position[self._row(row)]

    def key_size(self, Py_ssize_t row):
        cdef const char* data
        return _span(&self._key, self._row(row), &data)

    def value_size(self, Py_ssize_t row):
        cdef const char* data
        return _span(&self._value, self._row(row), &data)

    def records(self):
        """Every row as a ``send_records`` tuple, in row order (for the per-record path)."""
        cdef Py_ssize_t row, first = 0, count, h, length
        cdef bint present
        cdef const char* data
        out = []
        for row in range(self._rows):
            headers = []
            count = self._header_range(row, &first)
            for h in range(first, first + count):
                length = _span(&self._hname, h, &data)
                headers.append(
                    (PyUnicode_DecodeUTF8(data, length, NULL), self._bytes(&self._hvalue, h))
                )
            topic = _get(&self._topic, row, &present) if self._topic.values != NULL else 0
            partition = _get(&self._partition, row, &present)
            out.append((
                self.topics[topic], self._bytes(&self._value, row), self._bytes(&self._key, row),
                partition if present else None, None, headers,
            ))
        return out
