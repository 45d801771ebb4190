# Compiled declarations for futures.py (Cython's "augmenting .pxd"): the classes become extension
# types with C fields, and the .py stays the pure-Python reference, run as it is when
# AIOACCUM_NO_EXTENSIONS=1. Attributes other modules read are public.

cdef class ProduceRequestResult:
    cdef public object tp
    cdef public object loop
    cdef public long long base_offset
    cdef public long long log_append_time
    cdef public object error
    cdef public bint done
    cdef public list _callbacks
    cdef public list _listeners


cdef class FutureRecordMetadata:
    cdef public ProduceRequestResult _result
    cdef public Py_ssize_t _relative_offset
    cdef public long long _timestamp
    cdef public Py_ssize_t _key_size
    cdef public Py_ssize_t _value_size
    cdef public bint _cancelled
    cdef public object _cancel_message
    cdef public bint _asyncio_future_blocking
