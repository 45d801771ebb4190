# Compiled declarations for sender.py; see _core/futures.pxd.
from aioaccum._core.accumulator cimport RecordAccumulator


cdef class Sender:
    cdef public RecordAccumulator _acc
    cdef public object _kafka
    cdef public object _acks
    cdef public object _clock
    cdef public double _delivery_timeout
    cdef public object _fatal
    cdef public bint _force_close
    cdef public dict _in_flight
    cdef public set _in_flight_batches
    cdef public object _init_attempts
    cdef public object _init_task
    cdef public Py_ssize_t _max_in_flight
    cdef public Py_ssize_t _max_request_size
    cdef public object _metrics
    cdef public set _muted
    cdef public dict _next_expected
    cdef public object _next_init_at
    cdef public list _progress
    cdef public set _request_tasks
    cdef public object _request_timeout_ms
    cdef public object _retries
    cdef public double _retry_backoff
    cdef public double _retry_backoff_max
    cdef public object _rng
    cdef public bint _running
    cdef public object _txn
    cdef public object _wakeup
    cdef public bint _woken
    cdef public object _loop
    cdef public bint _wake_scheduled
    cdef object __weakref__
