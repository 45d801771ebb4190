# Compiled declarations for ready_index.py; see futures.pxd.
cimport cython
from aioaccum._core._cgc cimport gc_untrack
from aioaccum._core.batch cimport ProducerBatch


cdef class ReadyIndex:
    cdef public dict _batches
    cdef public set _muted
    cdef public double _linger
    cdef public double _delivery_timeout
    cdef public object _cluster
    cdef public object _version
    cdef public long long _seq
    cdef public long long _generation
    cdef public list _touched
    cdef public set nonempty
    cdef public dict _leaders
    cdef public set _leaderless
    cdef public dict _rotations
    cdef public dict _queued
    cdef public dict _queued_on
    cdef public dict _sendable
    cdef public dict _sendable_on
    cdef public object _lingers
    cdef public list _timers
    cdef public dict _timed
    cdef public list _expiry
    cdef public dict _expiry_watched

    cpdef touch(self, tp)
    # From the accumulator's load measure, once per partition with data per sender turn.
    cpdef long leader(self, tp) except? -3
    cpdef opened(self, tp, double created)

    @cython.locals(reached=cython.double)
    cpdef sync(self, cluster, double now)

    @cython.locals(
        taken=list, size=Py_ssize_t, first=ProducerBatch, dq=object, rotation=object,
        queued=dict, batches=dict, sendable=dict,
    )
    cpdef list drain_node(self, cluster, node, Py_ssize_t max_size, double now, txn,
                          filling=*)

    @cython.locals(
        dq=object, head=ProducerBatch, leader=object, lingered=cython.double,
        backoff_ends=cython.double,
    )
    cdef _refresh(self, tp, cluster, double now)

    cdef _unqueue(self, tp)

    cdef _rebuild(self, cluster, version)

    cdef _forget_placement(self)
