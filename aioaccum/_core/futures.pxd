# Compiled declarations for futures.py (Cython's "augmenting .pxd"): the classes become extension
# types with C fields, and the .py stays the pure-Python reference, run as it is when
# AIOACCUM_NO_EXTENSIONS=1. Attributes other modules read are public.

cimport cython

cdef class ProduceRequestResult:
    cdef public object tp
    cdef public str topic
    cdef public object partition
    cdef public object loop
    cdef public long long base_offset
    cdef public long long log_append_time
    cdef public object error
    cdef public bint done
    cdef public list _callbacks
    cdef public object _cancel_messages
    cdef public list _listeners
    cdef public object _latch
    cdef public object _thread_waiters

    cdef _settle(self)
    cdef _track(self)
    # Once per batch that ends, from the batch: a C call.
    cpdef set(self, long long base_offset, long long log_append_time, error)


# In and out of the garbage collector's lists (ProduceRequestResult._settle says why).
from aioaccum._core._cgc cimport gc_track, gc_untrack


# Kept small, a million of them being an ordinary load: 32-bit sizes and offset (a record and a
# batch are far below 2 GiB), two one-byte flags, one 64-bit timestamp, no C methods (which would
# add a pointer to their table to every object), and the rare cancel message kept in the batch
# result: 46 bytes with the object header, allocated in 48. The flag asyncio reads
# (_asyncio_future_blocking) is a property of FutureRecordMetadata over _blocking: a field of
# the subclass would start past the base's padding and take the object to 64 bytes.
cdef class RecordFuture:
    cdef public ProduceRequestResult _result
    cdef public long long _timestamp
    cdef public int _relative_offset
    cdef public int _key_size
    cdef public int _value_size
    cdef public unsigned char _cancelled
    cdef public unsigned char _blocking


cdef class FutureRecordMetadata(RecordFuture):
    pass


cdef class ThreadRecordFuture(RecordFuture):
    pass


# A RecordMetadata (a tuple subclass) allocated and filled in place.
cdef extern from *:
    """
    static inline PyObject *aioaccum_new_record_metadata(
        PyObject *type, PyObject *topic, PyObject *partition, long long offset,
        long long timestamp, int key_size, int value_size
    ) {
        PyObject *items[4];
        PyObject *tuple;
        int i;
        items[0] = PyLong_FromLongLong(offset);
        items[1] = PyLong_FromLongLong(timestamp);
        items[2] = PyLong_FromLong(key_size);
        items[3] = PyLong_FromLong(value_size);
        if (!items[0] || !items[1] || !items[2] || !items[3]) goto fail;
        tuple = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 6);
        if (tuple == NULL) goto fail;
        Py_INCREF(topic);
        PyTuple_SET_ITEM(tuple, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(tuple, 1, partition);
        for (i = 0; i < 4; i++) PyTuple_SET_ITEM(tuple, i + 2, items[i]);
        return tuple;
    fail:
        for (i = 0; i < 4; i++) Py_XDECREF(items[i]);
        return NULL;
    }
    """
    object new_record_metadata "aioaccum_new_record_metadata"(
        object type, object topic, object partition, long long offset, long long timestamp,
        int key_size, int value_size
    )


@cython.locals(result=ProduceRequestResult, base=cython.longlong, log_append_time=cython.longlong,
               offset=cython.longlong, timestamp=cython.longlong)
cpdef object metadata_of(RecordFuture future)



# Awaiting a record future: its type's am_send slot calls await_step, which yields the future
# while its batch is pending and then returns the metadata directly, as asyncio's own futures do
# in C: no generator object per await, and no StopIteration to carry the result.
cdef extern from *:
    """
    typedef PyObject *(*aioaccum_await_step_fn)(PyObject *);

    static inline aioaccum_await_step_fn *aioaccum_await_step_slot(void) {
        static aioaccum_await_step_fn step = NULL;
        return &step;
    }

    static inline PySendResult aioaccum_future_am_send(
        PyObject *future, PyObject *arg, PyObject **result
    ) {
        PyObject *step = (*aioaccum_await_step_slot())(future);
        *result = step;
        if (step == NULL) return PYGEN_ERROR;
        return step == future ? PYGEN_NEXT : PYGEN_RETURN;
    }

    static inline int aioaccum_install_await_step(PyObject *type, void *step) {
        PyTypeObject *t = (PyTypeObject *)type;
        if (t->tp_as_async == NULL || t->tp_as_async->am_await == NULL) {
            PyErr_SetString(PyExc_TypeError, "the record future type has no __await__");
            return -1;
        }
        *aioaccum_await_step_slot() = (aioaccum_await_step_fn)step;
        t->tp_as_async->am_send = aioaccum_future_am_send;
        PyType_Modified(t);
        return 0;
    }
    """
    int install_await_step "aioaccum_install_await_step"(object type, void *step) except -1


cdef object await_step(FutureRecordMetadata future)
