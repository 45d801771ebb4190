# Compiled declarations for sender.py; see _core/futures.pxd.
cimport cython
from aioaccum._core.batch cimport ProducerBatch
from aioaccum._core.sender_core cimport SenderCore


cdef class Sender:
    cdef public SenderCore core
    cdef public object _kafka
    cdef public object _acks
    cdef public object _request_timeout_ms
    cdef public object _clock
    cdef public set _tasks
    cdef public dict _requests
    cdef public object _wakeup
    cdef public bint _woken
    cdef public double _deadline
    cdef public object _timer
    cdef public object _loop
    cdef public bint _wake_scheduled
    cdef public list _progress
    cdef public long long _ended_seen
    cdef public bint _stopped
    cdef public object _failure_log
    cdef public object before_produce
    cdef object __weakref__

    # Once per sender turn, request or answer, called from inside the class: C calls rather
    # than calls by name. (``_on_answer`` is also every request's callback, as a bound method.)
    cpdef wakeup(self)
    cpdef _notify_progress(self, bint always=*)
    cpdef _carry_out(self, action)
    cpdef double _now(self) except? -1.0
    cpdef _send(self, request)

    @cython.locals(batch=ProducerBatch, entries=list)
    cpdef _write(self, node, list batches, double sent)

    cpdef _on_answer(self, handle, answers, error)
    cpdef _ended(self)
