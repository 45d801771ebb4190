# cython: language_level=3, boundscheck=False, wraparound=False
"""The produce connections' write thread, compiled: see :mod:`aioaccum._kafka.write_thread`.

The thread runs in C with the GIL released from start to end. It takes jobs (a request's
buffers as an ``iovec`` array, and the connection's slot) from a FIFO under a mutex, writes
each with ``sendmsg`` and sleeps on a condition variable when there is none. Python objects are
touched on the loop's thread only: :meth:`WriteSlot.submit` takes the buffers' addresses there,
and the slot keeps the buffers alive until the thread has written them.
"""

from libc.stdlib cimport malloc, free, calloc
from libc.string cimport memset
from libc.errno cimport errno, EAGAIN, EINTR
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

import collections
import os
import threading

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void* iov_base
        size_t iov_len

cdef extern from "<sys/socket.h>" nogil:
    struct msghdr:
        void* msg_name
        unsigned int msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t sendmsg(int fd, const msghdr* msg, int flags)
    int shutdown(int fd, int how)
    int SHUT_RDWR
    int MSG_NOSIGNAL

cdef extern from "<errno.h>" nogil:
    int EWOULDBLOCK

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    short POLLOUT

cdef extern from "<unistd.h>" nogil:
    ssize_t write(int fd, const void* buf, size_t count)
    int close(int fd)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_destroy(pthread_mutex_t*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, void*)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_cond_broadcast(pthread_cond_t*)

cdef enum:
    # Linux takes at most 1024 buffers per call (IOV_MAX); a longer request takes several.
    MAX_IOV = 1024
    # While the socket is full, the thread waits for room in slices of this many ms, looking
    # at the slot's detach flag between them (a detach also shuts the socket, ending a wait).
    POLL_SLICE_MS = 50


cdef struct SlotState:
    int fd                  # a dup() of the connection's socket, owned by the slot
    long long submitted     # jobs handed over (loop thread only)
    long long written       # jobs finished, written or dropped (under the mutex)
    int error               # the errno that ended the writes, 0 while none did
    int detached            # set by detach(); queued jobs are dropped, no new ones come
    int notify_pending      # the loop has a wake-up coming for this slot


cdef struct Job:
    SlotState* slot
    long long seq
    iovec* iov
    int count
    int notify
    Job* next


cdef class WriteThread:
    """One writer thread for the produce connections of one producer."""

    cdef pthread_mutex_t mu
    cdef pthread_cond_t work          # a job was queued, or stop was asked
    cdef pthread_cond_t idle          # the thread finished a job
    cdef Job* head
    cdef Job* tail
    cdef SlotState* current           # the slot whose job is being written, NULL when none
    cdef int stop
    cdef int wake_fd                  # written (one byte) when a slot wants the loop's attention
    cdef int wake_pending
    cdef readonly int read_fd
    cdef object _thread
    cdef object _slots                # the attached WriteSlot objects, for the wake-up

    def __cinit__(self):
        pthread_mutex_init(&self.mu, NULL)
        pthread_cond_init(&self.work, NULL)
        pthread_cond_init(&self.idle, NULL)
        self.head = self.tail = NULL
        self.current = NULL
        self.wake_fd = -1
        self.read_fd = -1

    def __init__(self):
        self.read_fd, self.wake_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.wake_fd, False)
        self._slots = set()
        self._thread = threading.Thread(
            target=self._run, name="aioaccum-produce-writes", daemon=True
        )
        self._thread.start()

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mu)
        pthread_cond_destroy(&self.work)
        pthread_cond_destroy(&self.idle)

    @property
    def alive(self):
        return self._thread is not None and self._thread.is_alive()

    def attach(self, int fd):
        """A slot for a connection's socket ``fd`` (duplicated: the slot owns its copy)."""
        if self.stop or not self.alive:
            return None  # stopped, or not running in this process (after a fork)
        cdef WriteSlot slot = WriteSlot.__new__(WriteSlot)
        slot._init(self, os.dup(fd))
        self._slots.add(slot)
        return slot

    def take_wakeups(self):
        """The slots that asked for the loop's attention since the last call (the loop calls
        this when :attr:`read_fd` is readable)."""
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        cdef list slots = list(self._slots)
        cdef Py_ssize_t i, n = len(slots)
        cdef bytearray flags = bytearray(n)
        cdef unsigned char* flag = flags
        cdef SlotState** states = <SlotState**>malloc(sizeof(SlotState*) * (n if n else 1))
        if states == NULL:
            raise MemoryError()
        for i in range(n):
            states[i] = (<WriteSlot>slots[i]).state
        # Under the mutex, so that a wake-up the thread posts meanwhile is either seen here or
        # followed by another byte on the pipe; nothing in between allocates or runs Python.
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.wake_pending = 0
            for i in range(n):
                if states[i] != NULL and states[i].notify_pending:
                    states[i].notify_pending = 0
                    flag[i] = 1
            pthread_mutex_unlock(&self.mu)
        free(states)
        return [slots[i] for i in range(n) if flag[i]]

    def close(self):
        """Stop the thread once its queue is done; every slot should be detached first."""
        cdef WriteSlot slot
        for slot in list(self._slots):
            slot.detach()
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.stop = 1
            pthread_cond_signal(&self.work)
            pthread_mutex_unlock(&self.mu)
        thread = self._thread
        if thread is not None:
            # Bounded: every slot is detached (its socket shut), so a write in progress ends.
            thread.join(5.0)
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.wake_fd >= 0 and not (thread is not None and thread.is_alive()):
            os.close(self.wake_fd)
            self.wake_fd = -1

    def _run(self):
        with nogil:
            self._loop()

    cdef void _loop(self) noexcept nogil:
        cdef Job* job
        cdef SlotState* slot
        cdef int failed
        cdef int wake
        cdef char one = 1
        while True:
            pthread_mutex_lock(&self.mu)
            while self.head == NULL and not self.stop:
                pthread_cond_wait(&self.work, &self.mu)
            if self.head == NULL:
                pthread_mutex_unlock(&self.mu)
                return
            job = self.head
            self.head = job.next
            if self.head == NULL:
                self.tail = NULL
            slot = job.slot
            self.current = slot
            pthread_mutex_unlock(&self.mu)

            failed = 0
            if not slot.error and not slot.detached:
                failed = _write_all(slot, job.iov, job.count)

            pthread_mutex_lock(&self.mu)
            self.current = NULL
            slot.written = job.seq
            wake = 0
            if failed and not slot.error:
                slot.error = failed
                wake = 1
            if job.notify:
                wake = 1
            if wake and not slot.detached:
                slot.notify_pending = 1
                if not self.wake_pending:
                    self.wake_pending = 1
                    write(self.wake_fd, &one, 1)
            pthread_cond_broadcast(&self.idle)
            pthread_mutex_unlock(&self.mu)
            free(job.iov)
            free(job)


cdef int _write_all(SlotState* slot, iovec* iov, int count) noexcept nogil:
    """Write every buffer; 0 when done, else the errno that stopped it."""
    cdef msghdr msg
    cdef pollfd p
    cdef ssize_t n
    cdef int i = 0
    memset(&msg, 0, sizeof(msg))
    while i < count:
        msg.msg_iov = iov + i
        msg.msg_iovlen = count - i if count - i < MAX_IOV else MAX_IOV
        n = sendmsg(slot.fd, &msg, MSG_NOSIGNAL)
        if n < 0:
            if errno == EINTR:
                continue
            if errno == EAGAIN or errno == EWOULDBLOCK:
                if slot.detached:
                    return EAGAIN
                p.fd = slot.fd
                p.events = POLLOUT
                p.revents = 0
                poll(&p, 1, POLL_SLICE_MS)
                continue
            return errno if errno else -1
        while i < count and <size_t>n >= iov[i].iov_len:
            n -= iov[i].iov_len
            i += 1
        if i < count and n > 0:
            iov[i].iov_base = <char*>iov[i].iov_base + n
            iov[i].iov_len -= n
    return 0


cdef class WriteSlot:
    """One connection's place on the write thread (see :class:`WriteThread.attach`)."""

    cdef SlotState* state
    cdef WriteThread owner
    cdef object _kept                 # (seq, buffers) of the jobs not known to be finished
    cdef public object owner_conn     # the connection, for the loop's wake-up

    cdef _init(self, WriteThread owner, int fd):
        self.owner = owner
        self._kept = collections.deque()
        self.state = <SlotState*>calloc(1, sizeof(SlotState))
        if self.state == NULL:
            os.close(fd)
            raise MemoryError()
        self.state.fd = fd

    @property
    def submitted(self):
        return self.state.submitted if self.state != NULL else 0

    @property
    def written(self):
        return self.state.written if self.state != NULL else 0

    @property
    def busy(self):
        """Whether the thread may still read buffers of this slot's jobs."""
        return self.state != NULL and self.state.written < self.state.submitted

    @property
    def error(self):
        """The errno that stopped this slot's writes (its later jobs are dropped), or 0."""
        return self.state.error if self.state != NULL else 0

    def submit(self, list parts, bint notify=False):
        """Queue one request's buffers; returns its sequence number. With ``notify``, the
        loop is woken (:meth:`WriteThread.take_wakeups`) once it is written."""
        cdef Py_ssize_t n = len(parts), i
        cdef Py_buffer view
        cdef Job* job
        cdef long long seq
        cdef WriteThread owner = self.owner
        cdef SlotState* state = self.state
        if state == NULL or state.detached:
            raise RuntimeError("write slot detached")
        job = <Job*>malloc(sizeof(Job))
        if job == NULL:
            raise MemoryError()
        job.iov = <iovec*>malloc(sizeof(iovec) * (n if n else 1))
        if job.iov == NULL:
            free(job)
            raise MemoryError()
        for i in range(n):
            # The address stays valid after the release: the slot keeps ``parts`` alive until
            # the thread is done, and a pooled buffer cannot resize while a view of it exists.
            try:
                PyObject_GetBuffer(parts[i], &view, PyBUF_SIMPLE)
            except BaseException:
                free(job.iov)
                free(job)
                raise
            job.iov[i].iov_base = view.buf
            job.iov[i].iov_len = <size_t>view.len
            PyBuffer_Release(&view)
        job.count = <int>n
        job.notify = notify
        job.slot = state
        job.next = NULL
        state.submitted += 1
        seq = job.seq = state.submitted
        kept = self._kept
        kept.append((seq, parts))
        written = state.written
        while kept and kept[0][0] <= written:
            kept.popleft()
        with nogil:
            pthread_mutex_lock(&owner.mu)
            if owner.tail == NULL:
                owner.head = owner.tail = job
            else:
                owner.tail.next = job
                owner.tail = job
            pthread_cond_signal(&owner.work)
            pthread_mutex_unlock(&owner.mu)
        # Not job.seq: the thread may have written and freed the job by now.
        return seq

    def detach(self):
        """End this slot: shut the socket, drop its queued jobs, wait out the one being
        written, and close the slot's descriptor. Afterwards no thread reads any buffer this
        slot was given. Idempotent."""
        cdef SlotState* state = self.state
        cdef WriteThread owner = self.owner
        cdef Job* job
        cdef Job* prev
        cdef Job* nxt
        if state == NULL:
            return
        with nogil:
            pthread_mutex_lock(&owner.mu)
            state.detached = 1
            # A write in progress (or waiting for room) ends at once on a shut socket.
            shutdown(state.fd, SHUT_RDWR)
            prev = NULL
            job = owner.head
            while job != NULL:
                nxt = job.next
                if job.slot == state:
                    if prev == NULL:
                        owner.head = nxt
                    else:
                        prev.next = nxt
                    if owner.tail == job:
                        owner.tail = prev
                    free(job.iov)
                    free(job)
                else:
                    prev = job
                job = nxt
            while owner.current == state:
                pthread_cond_wait(&owner.idle, &owner.mu)
            state.written = state.submitted
            pthread_mutex_unlock(&owner.mu)
            close(state.fd)
        free(state)
        self.state = NULL
        self._kept.clear()
        owner._slots.discard(self)
