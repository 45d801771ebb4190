# Compiled declarations for metrics.py; see _core/futures.pxd. Recording runs once per batch or
# per request: each is a few C calls into the sensors below.
cimport cython
from aioaccum._core.batch cimport ProducerBatch


cdef class _Sample:
    cdef public double start
    cdef public double last
    cdef public double total
    cdef public long long count
    cdef public double peak

    cpdef reset(self, double now)


cdef class Sensor:
    cdef public double _window
    cdef public long long _num
    cdef public list _ring
    cdef public Py_ssize_t _current
    cdef public double total
    cdef public long long count

    @cython.locals(ring=list, sample=_Sample)
    cpdef record(self, double value, double now)
    cpdef add(self, double value)
    @cython.locals(current=Py_ssize_t, ring=list, sample=_Sample)
    cdef _Sample _advance(self, double now)
    @cython.locals(expiry=cython.double, sample=_Sample)
    cdef _purge(self, double now)
    @cython.locals(ring=list, total=cython.double, oldest=cython.double, elapsed=cython.double,
                   full=cython.longlong, sample=_Sample)
    cpdef double rate(self, double now)
    @cython.locals(total=cython.double, count=cython.longlong, sample=_Sample)
    cpdef double avg(self, double now)
    @cython.locals(peak=cython.double, sample=_Sample)
    cpdef double max(self, double now)


cdef class TopicMetrics:
    cdef public Sensor sent
    cdef public Sensor bytes
    cdef public Sensor compression
    cdef public Sensor retries
    cdef public Sensor errors


cdef class ProducerMetrics:
    cdef public object _clock
    cdef public double _window
    cdef public long long _num
    cdef public object client_id
    cdef public bint _windowed
    cdef public Sensor _sent
    cdef public Sensor _bytes
    cdef public Sensor _errors
    cdef public Sensor _retries
    cdef public Sensor _splits
    cdef public Sensor _requests
    cdef public Sensor _queue_time
    cdef public Sensor _latency
    cdef public Sensor _throttle
    cdef public Sensor _records_per_request
    cdef public Sensor _compression
    cdef public Sensor _pool_wait
    cdef public Sensor _exhausted
    cdef public dict _topics
    cdef public object _pool
    cdef public double _waited_seen
    cdef public long long _exhausted_seen

    @cython.locals(metrics=TopicMetrics)
    cdef TopicMetrics _topic(self, str topic)
    @cython.locals(batch=ProducerBatch, records=Py_ssize_t)
    cpdef record_drained(self, batches, double now)
    @cython.locals(size=Py_ssize_t, count=Py_ssize_t, ratio=cython.double, topic=TopicMetrics)
    cpdef record_success(self, ProducerBatch batch, double now)
    @cython.locals(now=cython.double)
    cpdef record_errors(self, str topic, Py_ssize_t count)
    @cython.locals(now=cython.double)
    cpdef record_retries(self, str topic, Py_ssize_t count)
    cpdef record_response(self, double latency, double throttle_time_ms, double now)
    @cython.locals(waited=cython.double, exhausted=cython.longlong)
    cdef _fold_pool(self, double now)
