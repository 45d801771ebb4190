# Compiled declarations for producer.py; see _core/futures.pxd.
cimport cython
from aioaccum._core.accumulator cimport RecordAccumulator
from aioaccum._core.validate cimport checked_timestamp, wall_clock_ms


cdef class Producer:
    cdef public object _config
    cdef public object _kafka_override
    cdef public object _kafka
    cdef public dict _partitions_cache
    cdef public object _pool
    cdef public RecordAccumulator _acc
    cdef public object _sender
    cdef public object _sender_task
    cdef public object _metrics
    cdef public object _partitioner
    cdef public object _state
    cdef public Py_ssize_t _max_record_size
    cdef public bint _sticky
    cdef public object _loop
    cdef public long long _loop_thread
    cdef public object _parts
    cdef public object _key_serializer
    cdef public object _value_serializer
    cdef public bint _ignore_keys
    cdef public double _max_block_ms
    cdef public long long _batches_seen
    cdef public object _transactions
    cdef public object _hooks
    cdef public object _journal
    cdef public long long journal_recovered
    cdef object __weakref__

    cpdef tuple _checked(self, key, value, headers, timestamp_ms)
    cpdef send_from_thread(
        self, topic, value=*, key=*, partition=*, timestamp_ms=*, headers=*
    )
