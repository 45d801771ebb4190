# Compiled declarations for partitioner.py; see futures.pxd.
cimport cython
from aioaccum._core._cmurmur2 cimport murmur2_at

cdef class _TopicState:
    cdef public object partition
    cdef public long long produced
    cdef public object queue_sizes
    cdef public frozenset excluded
    cdef public tuple in_rack
    cdef public object rack_seen

    cpdef set_load(self, queue_sizes, excluded)


cdef class BuiltInPartitioner:
    cdef public Py_ssize_t _sticky_batch_size
    cdef public bint _adaptive
    cdef public object _rng
    cdef public bint _scripted
    cdef public dict _topics

    @cython.locals(state=_TopicState)
    cpdef object partition(self, str topic, cluster)

    @cython.locals(state=_TopicState, produced=cython.longlong, limit=cython.longlong)
    cpdef bint update_partition_info(
        self, str topic, partition, Py_ssize_t appended_bytes, bint enable_switch=*
    )

    @cython.locals(state=_TopicState)
    cpdef bint on_new_batch(self, str topic, partition) except -1

    @cython.locals(top=cython.longlong, pick=cython.longlong, i=Py_ssize_t, loads=list,
                   sizes=dict, load=cython.longlong, total=cython.longlong)
    cdef object _next_partition(self, str topic, _TopicState state, cluster)

    cdef Py_ssize_t _below(self, Py_ssize_t n) except -1

    # Once per sender turn, from the accumulator's load measure: C calls.
    cpdef object measured_topics(self)

    @cython.locals(state=_TopicState)
    cpdef update_load_stats(self, dict queue_sizes, excluded)


cpdef object partition_for(
    str topic, partition, key_bytes, value_bytes, partitions, cluster, partitioner,
    bint ignore_keys,
)


cpdef long murmur2(data) except? -1

cpdef long to_positive(long n)
