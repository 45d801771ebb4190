cimport cython
# Compiled declarations for pool.py; see _core/futures.pxd. Compiled, nothing the pool does under
# its lock runs Python bytecode, so a thread never loses the GIL while it holds the lock: that
# would make every other appending thread block on it.
cdef class BufferPool:
    cdef public Py_ssize_t _total
    cdef public Py_ssize_t _poolable
    cdef public object _clock
    cdef public object lock
    cdef object _acquire
    cdef object _release
    cdef public object _free
    cdef public dict _sized
    cdef public Py_ssize_t _sized_bytes
    cdef public Py_ssize_t _unallocated
    cdef public Py_ssize_t _allocated
    cdef public dict _waiters
    cdef public bint _closed
    cdef public long long _allocations
    cdef public long long _queued_allocations
    cdef public long long _exhausted
    cdef public double _wait_time
    cdef object __weakref__
    # Instance attributes beyond these fields: tests wrap methods of a running producer's pool.
    cdef dict __dict__

    # The paths every pooled chunk takes (see pool.py), with C arithmetic.
    @cython.locals(sized=list)
    cdef object _take(self, Py_ssize_t size)

    @cython.locals(sized=list, length=Py_ssize_t)
    cdef int _give(self, object buffer, Py_ssize_t size) except -1
