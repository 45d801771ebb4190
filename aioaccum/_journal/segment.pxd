# Compiled declarations for segment.py (see _core/futures.pxd): the journaled append reads the
# newest segment's fields once per record, and C fields spare a dictionary lookup each.

from aioaccum._journal._cwriter cimport EntryWriter as CompiledEntryWriter


cdef class Segment:
    cdef public int _fd
    cdef public object _map
    cdef public long long first_seq
    cdef public dict owed
    cdef public object path
    cdef public Py_ssize_t records
    cdef public Py_ssize_t size
    cdef public long long synced_pos
    cdef public set topics
    cdef public CompiledEntryWriter writer
