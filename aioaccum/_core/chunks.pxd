# Compiled declarations for chunks.py; see futures.pxd. With keys spread over many partitions a
# batch holds a few records, and these steps run once per batch: compiled, they cost little
# beside its records.
cimport cython
from aioaccum._core._cgc cimport gc_untrack


@cython.locals(size=Py_ssize_t)
cpdef Py_ssize_t opening_chunk_size(Py_ssize_t chunk_size, Py_ssize_t record_size,
                                    Py_ssize_t total_memory, Py_ssize_t batch_size) except -1

@cython.locals(left=Py_ssize_t, n=Py_ssize_t, out=list)
cpdef list parts(list chunks, Py_ssize_t size)

@cython.locals(kept=Py_ssize_t, total=Py_ssize_t)
cpdef trim(list chunks, Py_ssize_t size, sink)

@cython.locals(largest=Py_ssize_t, size=Py_ssize_t)
cpdef Py_ssize_t largest_chunk_for(Py_ssize_t chunk_size) except -1

@cython.locals(largest=Py_ssize_t, size=Py_ssize_t)
cpdef Py_ssize_t next_chunk_size(Py_ssize_t chunk_size, Py_ssize_t capacity,
                                 Py_ssize_t short) except -1
