# C declarations of the compiled builder, for compiled modules that append to it directly
# (aioaccum._core._carrow writes Arrow rows through try_append_raw). _crecords.pyx has the code.
from libc.stdint cimport int64_t, uint32_t


cdef class MemoryRecordsBuilder:
    cdef object _buffer
    cdef object _compression
    cdef int _codec  # int(_compression): tested on every append
    cdef object _level
    cdef int64_t _write_limit
    cdef int64_t _limit  # what appends are checked against; -1 once closed
    cdef bint _base_from_first
    cdef int64_t _base_timestamp
    cdef int64_t _max_timestamp
    cdef double _est_factor
    cdef Py_ssize_t _num_records
    cdef Py_ssize_t _pos
    cdef object _view  # memoryview of the buffer being written: pins its size
    cdef unsigned char* _data  # _view's bytes when they can be written directly, else NULL
    cdef Py_ssize_t _capacity
    cdef object _spill
    cdef bint _appends_closed
    cdef bint _closed
    cdef object _out
    cdef Py_ssize_t _size
    cdef double _compression_ratio
    cdef object _producer_id
    cdef object _producer_epoch
    cdef object _base_sequence
    cdef object _is_transactional
    cdef object _chunks  # list of the pooled chunks, or None (one buffer, full allocation)
    cdef Py_ssize_t _chunk_size
    cdef object _source
    cdef object _sink
    cdef Py_ssize_t _off  # logical offset of the chunk being written (0 without chunks)
    cdef Py_ssize_t _end  # logical end of the chunk being written (_capacity without chunks)
    cdef Py_ssize_t _ci  # index of the chunk being written
    cdef object _tail  # compressed bytes the chunks could not hold, or None

    cdef void _point(self) noexcept
    cdef Py_ssize_t _append(
        self, int64_t timestamp, object key, object value, object headers, int64_t limit
    ) except -2
    cdef Py_ssize_t _append_encoded(self, int64_t timestamp, bytes record, int64_t limit) except -2
    cdef int _make_room(
        self, Py_ssize_t n, int64_t timestamp, Py_ssize_t pos, Py_ssize_t total, int64_t limit
    ) except -1
    cdef bint _add_chunks(self, Py_ssize_t needed) except -1
    cdef int _place(self, Py_ssize_t pos, Py_ssize_t end, bytes record) except -1
    cdef int _straddle(self, Py_ssize_t pos, bytes record) except -1
    cdef object _estimated_bytes_written(self)
    cdef int _grow(self, Py_ssize_t needed) except -1
    cdef void _release(self) except *
    cdef _write_header(self)
    cdef int _write_header_c(self, bytearray out) except -1
    cdef uint32_t _chunks_crc(self) except? 0
    cdef list _parts(self)
    cdef Py_ssize_t try_append_raw(
        self,
        int64_t timestamp,
        const char* key,
        Py_ssize_t key_len,
        const char* value,
        Py_ssize_t value_len,
        const unsigned char* headers,
        Py_ssize_t headers_len,
    ) except -2
