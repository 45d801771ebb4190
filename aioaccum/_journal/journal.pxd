# Compiled declarations for journal.py (see _core/futures.pxd): Journal.append runs once per
# journaled record, called from the compiled accumulator without a Python frame.
cimport cython
from aioaccum._journal.segment cimport Segment


cdef class Journal:
    cdef public object folder
    cdef public Py_ssize_t segment_bytes
    cdef public long long max_bytes
    cdef public object _lock
    cdef public object _segments
    cdef public Segment _head
    cdef public dict _topic_ids
    cdef public dict _topic_names
    cdef public dict _owed
    cdef public long long _next_seq
    cdef public object recovery
    cdef public object _warm
    cdef public Py_ssize_t mapped
    cdef public Segment _spare
    cdef public bint recycle
    cdef public Py_ssize_t recycled
    cdef public object _run_tp
    cdef public Segment _run_segment
    cdef public Py_ssize_t _run
    cdef public long long _run_topic_id

    @cython.locals(seq=cython.longlong, segment=Segment, topic_id=object, owed=object)
    cpdef long long append(self, str topic, partition, timestamp, key, value, headers=*,
                           tp=*) except? -1
