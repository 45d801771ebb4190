# Compiled declarations for sender_core.py; see futures.pxd.
cimport cython
from aioaccum._core.accumulator cimport RecordAccumulator
from aioaccum._core.batch cimport ProducerBatch
from aioaccum._core.metrics cimport ProducerMetrics


cdef class SenderCore:
    cdef public RecordAccumulator _acc
    cdef public Py_ssize_t _max_request_size
    cdef public Py_ssize_t _max_in_flight
    cdef public double _delivery_timeout
    cdef public object _retries
    cdef public double _retry_backoff
    cdef public double _retry_backoff_max
    cdef public object _txn
    cdef public ProducerMetrics _metrics
    cdef public object _rng
    cdef public object state
    cdef public object fatal_error
    cdef public dict _in_flight
    cdef public dict _requests
    cdef public double _requests_expire_at
    cdef public bint _init_pending
    cdef public long long _init_attempts
    cdef public double _next_init_at
    cdef public long long batches_ended

    # A sender turn and an answer, from the shell (Sender): C calls.
    cpdef list poll(self, cluster, double now)
    cpdef list on_produce_response(self, node, list batches, answers, double now, sent=*)

    # Called once per batch or per request from inside the class: C calls, not Python ones.
    cdef _start_request(self, node, list batches, double now)
    cdef bint _must_mute(self, ProducerBatch batch)
    cdef double _expiry_of(self, list batches)
    @cython.locals(earliest=cython.double, expires=cython.double)
    cdef _expire_in_flight(self, double now)
    cdef _end_request(self, node, list batches)
    cdef _complete(
        self, ProducerBatch batch, long long base_offset, long long log_append_time, double now
    )
    cdef _on_batch_error(self, ProducerBatch batch, error, double now, set stale)
    cdef _foreign_error(self, ProducerBatch batch, error, decision, double now)
    cdef _on_failed(self, ProducerBatch batch, error, double now)
    cdef _fail_batch(self, ProducerBatch batch, error)
