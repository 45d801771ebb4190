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
    cdef public object _latch
    cdef public object _thread_waiters


# Kept small, a million of them being an ordinary load: 32-bit sizes and offset (a record and a
# batch are far below 2 GiB), two flags, one 64-bit timestamp.
cdef class RecordFuture:
    cdef public ProduceRequestResult _result
    cdef public long long _timestamp
    cdef public int _relative_offset
    cdef public int _key_size
    cdef public int _value_size
    cdef public bint _cancelled

    cpdef object _metadata(self)


cdef class FutureRecordMetadata(RecordFuture):
    cdef public object _cancel_message
    cdef public bint _asyncio_future_blocking


cdef class ThreadRecordFuture(RecordFuture):
    cdef object _wait(self, timeout)
