# cython: language_level=3, boundscheck=False, wraparound=False
"""A produce connection's write thread, compiled: see :mod:`aioaccum._kafka.write_thread`.

The thread runs in C with the GIL released from start to end. It takes jobs (a request's
buffers as an ``iovec`` array) from a FIFO under a mutex, writes each with ``sendmsg`` and
sleeps on a condition variable when there is none. Python objects are touched on the loop's
thread only: :meth:`WriteSlot.submit` takes the buffers' addresses there, and the slot keeps
the buffers alive until the thread has written them. The counters the loop reads without the
mutex are atomic loads of values the thread stores atomically under it.
"""

from libc.stdlib cimport malloc, free, calloc

import collections
import os
import threading

cdef extern from *:
    """
    #include <stddef.h>
    #include <errno.h>
    #if defined(_WIN32)
    /* No write thread on Windows: the connections keep their transports. These stand-ins
       only let the module build; aa_supported() says 0 and nothing starts a thread. */
    #define AA_SUPPORTED 0
    typedef struct { void *iov_base; size_t iov_len; } aa_iovec;
    typedef int aa_mutex_t;
    typedef int aa_cond_t;
    static void aa_mutex_init(aa_mutex_t *m) { (void)m; }
    static void aa_mutex_destroy(aa_mutex_t *m) { (void)m; }
    static void aa_mutex_lock(aa_mutex_t *m) { (void)m; }
    static void aa_mutex_unlock(aa_mutex_t *m) { (void)m; }
    static void aa_cond_init(aa_cond_t *c) { (void)c; }
    static void aa_cond_destroy(aa_cond_t *c) { (void)c; }
    static void aa_cond_wait(aa_cond_t *c, aa_mutex_t *m) { (void)c; (void)m; }
    static void aa_cond_signal(aa_cond_t *c) { (void)c; }
    static void aa_cond_broadcast(aa_cond_t *c) { (void)c; }
    static long aa_sendv(int fd, aa_iovec *iov, int count) { (void)fd; (void)iov; (void)count; return -ENOSYS; }
    static void aa_wait_writable(int fd, int ms) { (void)fd; (void)ms; }
    static void aa_shutdown(int fd) { (void)fd; }
    static void aa_close(int fd) { (void)fd; }
    static int aa_write_byte(int fd) { (void)fd; return -ENOSYS; }
    static void aa_nosigpipe(int fd) { (void)fd; }
    static long long aa_load_ll(long long *p) { return *(volatile long long *)p; }
    static void aa_store_ll(long long *p, long long v) { *(volatile long long *)p = v; }
    static int aa_load_int(int *p) { return *(volatile int *)p; }
    static void aa_store_int(int *p, int v) { *(volatile int *)p = v; }
    #else
    #define AA_SUPPORTED 1
    #include <pthread.h>
    #include <poll.h>
    #include <string.h>
    #include <unistd.h>
    #include <sys/socket.h>
    #include <sys/uio.h>
    #ifndef MSG_NOSIGNAL
    #define MSG_NOSIGNAL 0  /* macOS: SO_NOSIGPIPE is set on the socket instead */
    #endif
    typedef struct iovec aa_iovec;
    typedef pthread_mutex_t aa_mutex_t;
    typedef pthread_cond_t aa_cond_t;
    static void aa_mutex_init(aa_mutex_t *m) { pthread_mutex_init(m, NULL); }
    static void aa_mutex_destroy(aa_mutex_t *m) { pthread_mutex_destroy(m); }
    static void aa_mutex_lock(aa_mutex_t *m) { pthread_mutex_lock(m); }
    static void aa_mutex_unlock(aa_mutex_t *m) { pthread_mutex_unlock(m); }
    static void aa_cond_init(aa_cond_t *c) { pthread_cond_init(c, NULL); }
    static void aa_cond_destroy(aa_cond_t *c) { pthread_cond_destroy(c); }
    static void aa_cond_wait(aa_cond_t *c, aa_mutex_t *m) { pthread_cond_wait(c, m); }
    static void aa_cond_signal(aa_cond_t *c) { pthread_cond_signal(c); }
    static void aa_cond_broadcast(aa_cond_t *c) { pthread_cond_broadcast(c); }
    /* Bytes written, or -errno. */
    static long aa_sendv(int fd, aa_iovec *iov, int count) {
        struct msghdr msg;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = count;
        long n = (long)sendmsg(fd, &msg, MSG_NOSIGNAL);
        return n < 0 ? -(errno ? errno : EIO) : n;
    }
    static void aa_wait_writable(int fd, int ms) {
        struct pollfd p;
        p.fd = fd;
        p.events = POLLOUT;
        p.revents = 0;
        poll(&p, 1, ms);
    }
    static void aa_shutdown(int fd) { shutdown(fd, SHUT_RDWR); }
    static void aa_close(int fd) { close(fd); }
    /* 0, or -errno (-EAGAIN: the pipe is full, so a wake-up is pending anyway). */
    static int aa_write_byte(int fd) {
        char one = 1;
        for (;;) {
            if (write(fd, &one, 1) == 1) return 0;
            if (errno != EINTR) return -errno;
        }
    }
    static void aa_nosigpipe(int fd) {
    #ifdef SO_NOSIGPIPE
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof(on));
    #else
        (void)fd;
    #endif
    }
    static long long aa_load_ll(long long *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static void aa_store_ll(long long *p, long long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static int aa_load_int(int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static void aa_store_int(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    #endif
    static int aa_supported(void) { return AA_SUPPORTED; }
    """
    ctypedef struct aa_iovec:
        void* iov_base
        size_t iov_len
    ctypedef struct aa_mutex_t:
        pass
    ctypedef struct aa_cond_t:
        pass
    int EAGAIN
    int EINTR
    int EWOULDBLOCK
    void aa_mutex_init(aa_mutex_t*) nogil
    void aa_mutex_destroy(aa_mutex_t*) nogil
    void aa_mutex_lock(aa_mutex_t*) nogil
    void aa_mutex_unlock(aa_mutex_t*) nogil
    void aa_cond_init(aa_cond_t*) nogil
    void aa_cond_destroy(aa_cond_t*) nogil
    void aa_cond_wait(aa_cond_t*, aa_mutex_t*) nogil
    void aa_cond_signal(aa_cond_t*) nogil
    void aa_cond_broadcast(aa_cond_t*) nogil
    long aa_sendv(int fd, aa_iovec* iov, int count) nogil
    void aa_wait_writable(int fd, int ms) nogil
    void aa_shutdown(int fd) nogil
    void aa_close(int fd) nogil
    int aa_write_byte(int fd) nogil
    void aa_nosigpipe(int fd) nogil
    int aa_supported() nogil
    long long aa_load_ll(long long* p) nogil
    void aa_store_ll(long long* p, long long v) nogil
    int aa_load_int(int* p) nogil
    void aa_store_int(int* p, int v) nogil

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

cdef enum:
    # Linux takes at most 1024 buffers per call (IOV_MAX); a longer request takes several.
    MAX_IOV = 1024
    # While the socket is full, the thread waits for room in slices of this many ms, looking
    # at the slot's detach flag between them (a detach also shuts the socket, ending a wait).
    POLL_SLICE_MS = 50

SUPPORTED = bool(aa_supported())
"""Whether this platform has the write thread (every POSIX system; not Windows)."""


cdef struct SlotState:
    int fd                  # a dup() of the connection's socket, owned by the slot
    long long submitted     # jobs handed over (the loop's thread only)
    long long written       # jobs finished: written, failed or dropped (atomic)
    long long sent          # the last job written in full, with every one before it (atomic)
    int error               # the errno that ended the writes, 0 while none did (atomic)
    int detached            # set by detach(); queued jobs are dropped, no new ones come
    int notify_pending      # the loop has a wake-up coming for this slot (under the mutex)


cdef struct Job:
    SlotState* slot
    long long seq
    aa_iovec* iov
    int count
    int notify
    Job* next


cdef int _write_all(SlotState* slot, aa_iovec* iov, int count) noexcept nogil:
    """Write every buffer; 0 when done, else the errno that stopped it."""
    cdef long n
    cdef int i = 0
    while i < count:
        n = aa_sendv(slot.fd, iov + i, count - i if count - i < MAX_IOV else MAX_IOV)
        if n < 0:
            if n == -EINTR:
                continue
            if n == -EAGAIN or n == -EWOULDBLOCK:
                if aa_load_int(&slot.detached):
                    return EAGAIN
                aa_wait_writable(slot.fd, POLL_SLICE_MS)
                continue
            return <int>-n
        while i < count and <size_t>n >= iov[i].iov_len:
            n -= <long>iov[i].iov_len
            i += 1
        if i < count and n > 0:
            iov[i].iov_base = <char*>iov[i].iov_base + n
            iov[i].iov_len -= <size_t>n
    return 0


cdef class WriteThread:
    """One writer thread; a produce connection starts its own (:meth:`attach`)."""

    cdef aa_mutex_t mu
    cdef aa_cond_t work               # a job was queued, or stop was asked
    cdef aa_cond_t idle               # the thread finished a job
    cdef Job* head
    cdef Job* tail
    cdef SlotState* current           # the slot whose job is being written, NULL when none
    cdef int stop
    cdef int wake_fd                  # written (one byte) when a slot wants the loop's attention
    cdef int wake_pending
    cdef readonly int read_fd
    cdef readonly long pid            # the process that started the thread
    cdef object _thread
    cdef object _slots                # the attached WriteSlot objects, for the wake-ups

    def __cinit__(self):
        aa_mutex_init(&self.mu)
        aa_cond_init(&self.work)
        aa_cond_init(&self.idle)
        self.head = self.tail = NULL
        self.current = NULL
        self.wake_fd = -1
        self.read_fd = -1

    def __init__(self):
        if not aa_supported():
            raise RuntimeError("no write thread on this platform")
        self.pid = os.getpid()
        self._slots = set()
        self.read_fd, self.wake_fd = os.pipe()
        try:
            os.set_blocking(self.read_fd, False)
            os.set_blocking(self.wake_fd, False)
            self._thread = threading.Thread(
                target=self._run, name="aioaccum-produce-writes", daemon=True
            )
            self._thread.start()
        except BaseException:
            os.close(self.read_fd)
            os.close(self.wake_fd)
            self.read_fd = self.wake_fd = -1
            self._thread = None
            raise

    def __dealloc__(self):
        # Only reached once the thread has ended: it holds a reference to this object.
        aa_mutex_destroy(&self.mu)
        aa_cond_destroy(&self.work)
        aa_cond_destroy(&self.idle)

    @property
    def alive(self):
        return (self._thread is not None and self._thread.is_alive()
                and os.getpid() == self.pid)

    def attach(self, int fd):
        """A slot for a socket ``fd`` (duplicated: the slot owns its copy); None when the
        thread is stopped or belongs to another process (this one was forked)."""
        if self.stop or not self.alive:
            return None
        cdef WriteSlot slot = WriteSlot.__new__(WriteSlot)
        slot._init(self, os.dup(fd))
        self._slots.add(slot)
        return slot

    def take_wakeups(self):
        """The slots that asked for the loop's attention since the last call (the loop calls
        this when :attr:`read_fd` is readable); the loop's thread only."""
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
        # Only the loop's thread detaches slots, so none of these is freed meanwhile.
        with nogil:
            aa_mutex_lock(&self.mu)
            self.wake_pending = 0
            for i in range(n):
                if states[i] != NULL and states[i].notify_pending:
                    states[i].notify_pending = 0
                    flag[i] = 1
            aa_mutex_unlock(&self.mu)
        free(states)
        return [slots[i] for i in range(n) if flag[i]]

    def close(self):
        """Detach every slot, then stop the thread (bounded: no write can be in progress)."""
        cdef WriteSlot slot
        for slot in list(self._slots):
            slot.detach()
        forked = os.getpid() != self.pid
        if not forked:
            with nogil:
                aa_mutex_lock(&self.mu)
                self.stop = 1
                aa_cond_signal(&self.work)
                aa_mutex_unlock(&self.mu)
        thread = self._thread
        if thread is not None and not forked:
            thread.join(5.0)
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.wake_fd >= 0 and not self.alive:
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
        cdef int written
        while True:
            aa_mutex_lock(&self.mu)
            while self.head == NULL and not self.stop:
                aa_cond_wait(&self.work, &self.mu)
            if self.head == NULL:
                aa_mutex_unlock(&self.mu)
                return
            job = self.head
            self.head = job.next
            if self.head == NULL:
                self.tail = NULL
            slot = job.slot
            self.current = slot
            aa_mutex_unlock(&self.mu)

            failed = -1  # not attempted: the slot failed before, or is being detached
            if not aa_load_int(&slot.error) and not aa_load_int(&slot.detached):
                failed = _write_all(slot, job.iov, job.count)

            aa_mutex_lock(&self.mu)
            self.current = NULL
            wake = job.notify
            if failed == 0:
                aa_store_ll(&slot.sent, job.seq)
            elif failed > 0 and not slot.error:
                # Before ``written`` moves: a loop that sees this job finished sees why.
                aa_store_int(&slot.error, failed)
                wake = 1
            aa_store_ll(&slot.written, job.seq)
            if wake and not slot.detached:
                slot.notify_pending = 1
                if not self.wake_pending:
                    self.wake_pending = 1
                    written = aa_write_byte(self.wake_fd)
                    if written != 0 and written != -EAGAIN:
                        # Not delivered (a full pipe means a byte is waiting already): the
                        # next report writes again.
                        self.wake_pending = 0
            aa_cond_broadcast(&self.idle)
            aa_mutex_unlock(&self.mu)
            free(job.iov)
            free(job)


cdef class WriteSlot:
    """One connection's place on a write thread (see :meth:`WriteThread.attach`)."""

    cdef SlotState* state
    cdef WriteThread owner
    cdef object _kept                 # (seq, buffers) of the jobs not known to be finished
    cdef long long _detached_at       # jobs submitted when detached: all done with
    cdef public object owner_conn     # the connection, for the loop's wake-up

    cdef _init(self, WriteThread owner, int fd):
        self.owner = owner
        self._kept = collections.deque()
        self.state = <SlotState*>calloc(1, sizeof(SlotState))
        if self.state == NULL:
            os.close(fd)
            raise MemoryError()
        self.state.fd = fd
        aa_nosigpipe(fd)

    @property
    def submitted(self):
        return self.state.submitted if self.state != NULL else 0

    @property
    def written(self):
        """The last job the thread is done with (written, failed or dropped): it reads no
        buffer of that job or of any before it."""
        if self.state == NULL:
            return self._detached_at
        return aa_load_ll(&self.state.written)

    @property
    def sent(self):
        """The last job written in full, with every job before it."""
        return aa_load_ll(&self.state.sent) if self.state != NULL else 0

    @property
    def busy(self):
        """Whether the thread may still read buffers of this slot's jobs."""
        return self.state != NULL and aa_load_ll(&self.state.written) < self.state.submitted

    @property
    def error(self):
        """The errno that stopped this slot's writes (its later jobs are dropped), or 0."""
        return aa_load_int(&self.state.error) if self.state != NULL else 0

    def submit(self, list parts, bint notify=False):
        """Queue one request's buffers; returns its sequence number. With ``notify``, the
        loop is woken (:meth:`WriteThread.take_wakeups`) once the thread is done with it."""
        cdef Py_ssize_t n = len(parts), i
        cdef Py_buffer view
        cdef Job* job
        cdef long long seq
        cdef WriteThread owner = self.owner
        cdef SlotState* state = self.state
        if state == NULL or state.detached:
            raise RuntimeError("write slot detached")
        if n > 0x7FFFFFFF:
            raise ValueError(f"a request of {n} buffers; at most {0x7FFFFFFF}")
        job = <Job*>malloc(sizeof(Job))
        if job == NULL:
            raise MemoryError()
        job.iov = <aa_iovec*>malloc(sizeof(aa_iovec) * (n if n else 1))
        if job.iov == NULL:
            free(job)
            raise MemoryError()
        try:
            for i in range(n):
                # The address stays valid after the release: the slot keeps ``parts`` alive
                # until the thread is done, and a pooled buffer is never resized.
                PyObject_GetBuffer(parts[i], &view, PyBUF_SIMPLE)
                job.iov[i].iov_base = view.buf
                job.iov[i].iov_len = <size_t>view.len
                PyBuffer_Release(&view)
            seq = state.submitted + 1
            self._kept.append((seq, parts))
        except BaseException:
            free(job.iov)
            free(job)
            raise
        job.count = <int>n
        job.notify = notify
        job.slot = state
        job.seq = seq
        job.next = NULL
        state.submitted = seq
        kept = self._kept
        written = aa_load_ll(&state.written)
        while kept and kept[0][0] <= written:
            kept.popleft()
        with nogil:
            aa_mutex_lock(&owner.mu)
            if owner.tail == NULL:
                owner.head = owner.tail = job
            else:
                owner.tail.next = job
                owner.tail = job
            aa_cond_signal(&owner.work)
            aa_mutex_unlock(&owner.mu)
        return seq  # not job.seq: the thread may have written and freed the job by now

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
        self._detached_at = state.submitted
        if os.getpid() != owner.pid:
            # A forked child: no thread runs here, and shutting the socket would end the
            # parent's connection too. Its copy of the descriptor is all there is to let go.
            aa_close(state.fd)
        else:
            with nogil:
                aa_mutex_lock(&owner.mu)
                aa_store_int(&state.detached, 1)
                # A write in progress (or waiting for room) ends at once on a shut socket.
                aa_shutdown(state.fd)
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
                    aa_cond_wait(&owner.idle, &owner.mu)
                aa_mutex_unlock(&owner.mu)
                aa_close(state.fd)
        free(state)
        self.state = NULL
        self._kept.clear()
        owner._slots.discard(self)
