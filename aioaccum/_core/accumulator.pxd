# Compiled declarations for accumulator.py; see futures.pxd.
cimport cython
from aioaccum._core.batch cimport ProducerBatch
from aioaccum._core.futures cimport RecordFuture
from aioaccum._core.partitioner cimport BuiltInPartitioner, partition_for
from aioaccum._core.ready_index cimport ReadyIndex


cdef class RecordAccumulator:
    cdef public object _pool
    cdef public object _chunk_source
    cdef public object _chunk_sink
    cdef public BuiltInPartitioner _partitioner
    cdef public bint _adaptive
    cdef public double _availability_timeout
    cdef public dict _node_ready_at
    cdef public dict _node_drained_at
    cdef public set _loaded_topics
    cdef public object _custom
    cdef public bint _ignore_keys
    cdef public object _loop
    cdef public object _lock
    cdef public object _clock
    cdef object _acquire
    cdef object _release
    cdef public object _wakeup
    cdef public object _wakeup_threadsafe
    cdef public object _wake_by
    cdef public object _wake_by_threadsafe
    cdef public dict _tps
    cdef public bint threaded
    cdef public long long batches_created
    cdef public long long batches_per_turn
    cdef public object fatal_error
    cdef public object _txn
    cdef public Py_ssize_t _batch_size
    cdef public Py_ssize_t _chunk_size
    cdef public Py_ssize_t _open_size
    cdef public double _linger
    cdef public double _delivery_timeout
    cdef public object _compression
    cdef public object _compression_level
    cdef public object _estimator
    cdef public dict _batches
    cdef public set _incomplete
    cdef public set _muted
    cdef public ReadyIndex _index
    cdef public Py_ssize_t _flushes_in_progress
    cdef public bint _closed

    cpdef object append(
        self, str topic, partition, timestamp, key, value, headers, Py_ssize_t record_size,
        partitions, cluster, double now, granted=*, bint for_thread=*
    )

    @cython.locals(
        last=ProducerBatch, batch=ProducerBatch, future=RecordFuture, full=cython.bint,
        opened=cython.bint, sticky=cython.bint, dq=object,
    )
    cdef object _append(
        self, str topic, partition, timestamp, key, value, headers, Py_ssize_t record_size,
        partitions, cluster, double now, granted, bint for_thread
    )

    # Once per batch opened: a C call.
    cpdef ProducerBatch _new_batch(self, tp, buffer, double now, bint from_pool=*,
                                   Py_ssize_t write_limit=*)

    @cython.locals(tps=list)
    cpdef object _topic_partition(self, str topic, partition, partitions)

    cpdef _sticky_appended(self, str topic, partition, Py_ssize_t size, bint full)

    # Once per batch answered, from the sender's core: a C call.
    cpdef deallocate(self, ProducerBatch batch)

    cdef _wake(self, bint for_thread)

    @cython.locals(index=ReadyIndex, forced=cython.bint, deadline=cython.double,
                   next_check=cython.double)
    cpdef object ready(self, cluster, double now)

    # Once per sender turn, from the sender's core: C calls.
    @cython.locals(index=ReadyIndex, out=dict)
    cpdef dict drain(self, cluster, nodes, Py_ssize_t max_size, double now)
    cpdef list expired_batches(self, double now)

    @cython.locals(sizes=dict, loads=dict, excluded=dict, batches=dict, known=dict,
                   leader=cython.long)
    cpdef _measure_loads(self, ReadyIndex index)
