# Compiled declarations for batch.py; see futures.pxd.
cimport cython
from aioaccum._core._cgc cimport gc_untrack
from aioaccum._core.futures cimport (
    FutureRecordMetadata, ProduceRequestResult, RecordFuture, ThreadRecordFuture,
)


cdef class ProducerBatch:
    cdef object _builder_append
    cdef public object _final_state
    cdef public list _futures
    cdef public list _runs
    cdef public long long attempts
    cdef public double backoff
    cdef public long long base_sequence
    cdef public object buffer
    cdef public object builder
    cdef public bint closed
    cdef public double created
    cdef public bint from_pool
    cdef public double last_attempt
    cdef public bint possibly_written
    cdef public ProduceRequestResult result
    cdef public object split_into
    cdef public object tp

    @cython.locals(future=RecordFuture, delta=Py_ssize_t)
    cpdef RecordFuture try_append(self, timestamp, key, value, headers, bint for_thread=*)

    # Once per batch answered, from the sender's core: a C call.
    cpdef bint complete(self, long long base_offset, long long log_append_time) except -1

    # Once per batch sent, from the sender's typed loop: a C call.
    cpdef tuple request_entry(self)

    # Once per batch drained, from the ready index's drain: a C call.
    cpdef close(self)

    cdef bint _set_final_state(self, state) except -1
