# Compiled declarations for sender.py; see _core/futures.pxd.
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
