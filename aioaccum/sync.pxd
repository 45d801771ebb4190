# Compiled declarations for sync.py; see _core/futures.pxd. send() is on every record's path.
from aioaccum.producer cimport Producer


cdef class SyncProducer:
    cdef public object _config
    cdef public Producer _producer
    cdef public object _lock
    cdef public object _state
    cdef public object _close_timeout
    cdef public dict _final_metrics
    cdef public list _final_metric_values
    cdef public object _loop_factory
    cdef public object _loop
    cdef public object _loop_thread_id
    cdef public object _close_requested
    cdef public object _ready
    cdef public object _start_error
    cdef public object _thread
    cdef object __weakref__
