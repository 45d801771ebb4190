# Compiled declarations for journaled.py; see _core/futures.pxd. The journaled append overrides
# the compiled accumulator's, so the producer's call reaches it without a Python frame.
cimport cython
from aioaccum._core.accumulator cimport RecordAccumulator
from aioaccum._core.futures cimport ProduceRequestResult, RecordFuture
from aioaccum._journal.journal cimport Journal


cdef Py_ssize_t _BOUND_FIXED

cpdef Py_ssize_t entry_bound(str topic, Py_ssize_t record_size, Py_ssize_t headers) except? -1


cdef class _Range:
    cdef public object batch
    cdef public long long first
    cdef public long long last
    cdef public long long count
    cdef public object sealed
    cdef public Py_ssize_t parts


cdef class JournaledAccumulator(RecordAccumulator):
    cdef public Journal journal
    cdef public object syncer
    cdef public object journal_lock
    cdef public dict _ranges
    cdef public Py_ssize_t _room
    cdef public object _last_result
    cdef public _Range _last_range
    cdef public list room_waiters
    cdef public object room_freed
    cdef public Py_ssize_t threads_waiting
    cdef public double thread_block
    cdef public object spill
    cdef public bint spilling
    cdef public double spill_after_ms
    # Instance attributes beyond these fields: tests wrap methods of a running accumulator.
    cdef dict __dict__

    @cython.locals(future=RecordFuture, result=ProduceRequestResult, found=_Range, journal=Journal,
                   seq=cython.longlong, needed=Py_ssize_t, threaded=cython.bint)
    cpdef object append(
        self, str topic, partition, timestamp, key, value, headers, Py_ssize_t record_size,
        partitions, cluster, double now, granted=*, bint for_thread=*
    )
