# The compiled entry writer's fields and its C-callable append (see _cwriter.pyx).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


cdef class EntryWriter:
    cdef Py_buffer _view
    cdef bint _held
    cdef unsigned char* _data
    cdef public Py_ssize_t pos
    cdef public Py_ssize_t size

    cdef void _seal(self, Py_ssize_t pos, Py_ssize_t length, uint8_t kind) noexcept

    cpdef bint append_record(self, int64_t seq, uint32_t topic_id, int32_t partition,
                             int64_t timestamp, key, value, headers) except -1
