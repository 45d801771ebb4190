# Compiled declarations for metrics.py; see _core/futures.pxd. Recording runs once per batch.
cimport cython
from aioaccum._core.batch cimport ProducerBatch


cdef class ProducerMetrics:
    cdef public object _clock
    cdef public double _started
    cdef public long long records_sent
    cdef public long long bytes_sent
    cdef public long long batches_sent
    cdef public long long record_errors_total
    cdef public long long record_retries_total
    cdef public long long splits_total
    cdef public long long requests_total
    cdef public double _queue_time_total
    cdef public double _queue_time_max
    cdef public long long _queue_samples
    cdef public long long _batch_bytes_total
    cdef public long long _batch_records_total
    cdef public long long _compression_samples
    cdef public double _compression_rate_total

    @cython.locals(batch=ProducerBatch, queued=cython.double)
    cpdef record_drained(self, batches, double now)

    @cython.locals(size=Py_ssize_t, count=Py_ssize_t, ratio=cython.double)
    cpdef record_success(self, ProducerBatch batch, double now)
