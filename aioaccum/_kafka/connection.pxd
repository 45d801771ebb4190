# Compiled declarations for connection.py; see _core/futures.pxd. Every produce request is
# written and every answer read here: the connection and its FIFO entries are extension types,
# so a request's way from send_produce to the write, and an answer's from data_received to its
# completion, reads C fields and makes C calls rather than lookups and calls by name.
cimport cython


cdef class _Pending:
    cdef public long long correlation_id
    cdef public double deadline
    cdef public bint flexible

    cpdef read_answer(self, body)
    cpdef finish(self, result, error)


cdef class _Call(_Pending):
    cdef public object future
    cdef public object read


cdef class ProduceRequest(_Pending):
    cdef public int acks
    cdef public object batches
    cdef public ProduceConnection conn
    cdef public object done
    cdef public long long timeout_ms
    cdef public object transactional_id
    cdef public bint v12
    cdef public int version
    cdef public long long write_seq


cdef class ProduceConnection:
    cdef public str where
    cdef public object _settings
    cdef public bint _write_thread
    cdef public object _writer
    cdef public object _slot
    cdef public object _loop
    cdef public bytes _client_id
    cdef public object _transport
    cdef public bytearray _buffer
    cdef public object _pending
    cdef public list _unflushed
    cdef public list _held
    cdef public long long _correlation
    cdef public bint _paused
    cdef public object _closing
    cdef public bint _lost
    cdef public object _gone
    cdef public object _timer
    cdef public double _timer_at
    cdef public double _last_used
    cdef public double _reauth_at
    cdef public object _auth_task
    cdef public int _auth_version
    cdef public tuple produce_versions
    cdef public long long authentications
    cdef public long long reauthentications
    cdef object __weakref__

    @cython.locals(pos=Py_ssize_t, end=Py_ssize_t, size=Py_ssize_t)
    cpdef data_received(self, data)
    cpdef bint _usable(self)
    cpdef long long _next_id(self)
    cpdef long long _write(self, list parts, bint notify=*) except? -1
    cpdef _expect(self, long long cid, _Pending entry, bint flexible)
    cpdef send_produce(self, ProduceRequest request)
    cpdef int _version(self, bint v12) except? -1
    @cython.locals(found=list, by_topic=dict)
    cpdef _write_produce(self, ProduceRequest request)
    @cython.locals(entry=_Pending, cid=cython.longlong, start=Py_ssize_t)
    cpdef _answer(self, bytes frame)
    cpdef _arm(self, double when)
