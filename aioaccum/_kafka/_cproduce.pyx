# cython: language_level=3, boundscheck=False, wraparound=False
"""The produce request's framing and its answer, compiled: the twin of
:func:`aioaccum._kafka.produce.request_parts` and :func:`~aioaccum._kafka.produce.read_answers`.

Both run once per produce request. In Python they cost a struct call, a slice or a ``bytes``
per field; here the pieces between the batches are written into one C buffer, and the answer
is read with C integer loads. Where the answer lists the partitions in the order the request
did (checked one by one), its keys are the request's own ``TopicPartition`` objects: no topic
name is decoded and no key is made. An answer in another order is read all the same.
The parity tests hold both implementations to the same bytes and the same answers.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy

from aioaccum._core.cluster import TopicPartition
from aioaccum._kafka.answers import PartitionResponse, ProduceAnswers, batch_bytes_of
from aioaccum._kafka.errors import broker_error_for_code

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL

cdef extern from *:
    """
    /* A tuple subclass (a NamedTuple) of n items, allocated as the type does, items unset. */
    static PyObject *aioaccum_new_named(PyObject *type, Py_ssize_t n) {
        return ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
    }
    """
    object aioaccum_new_named(object type, Py_ssize_t n)

cdef object _TopicPartition = TopicPartition
cdef object _PartitionResponse = PartitionResponse
cdef object _ProduceAnswers = ProduceAnswers


cdef struct _Out:
    char* buf
    Py_ssize_t n
    Py_ssize_t cap


cdef int _room(_Out* out, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap = out.cap
    cdef char* grown
    if out.n + more <= cap:
        return 0
    while cap < out.n + more:
        cap *= 2
    grown = <char*>realloc(out.buf, cap)
    if grown == NULL:
        raise MemoryError()
    out.buf = grown
    out.cap = cap
    return 0


cdef int _be16(_Out* out, long v) except -1:
    _room(out, 2)
    out.buf[out.n] = <char>((v >> 8) & 0xFF)
    out.buf[out.n + 1] = <char>(v & 0xFF)
    out.n += 2
    return 0


cdef int _be32(_Out* out, long long v) except -1:
    _room(out, 4)
    cdef unsigned char* p = <unsigned char*>out.buf + out.n
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF
    out.n += 4
    return 0


cdef int _uvarint(_Out* out, unsigned long long v) except -1:
    _room(out, 10)
    while v >= 0x80:
        out.buf[out.n] = <char>((v & 0x7F) | 0x80)
        out.n += 1
        v >>= 7
    out.buf[out.n] = <char>v
    out.n += 1
    return 0


cdef int _raw(_Out* out, const char* data, Py_ssize_t size) except -1:
    _room(out, size)
    memcpy(out.buf + out.n, data, size)
    out.n += size
    return 0


cdef int _string(_Out* out, object text, bint flexible) except -1:
    """A nullable string: int16 length (-1 for None), or its compact form (uvarint length + 1,
    0 for None)."""
    cdef Py_ssize_t size
    cdef const char* data
    if text is None:
        if flexible:
            _uvarint(out, 0)
        else:
            _be16(out, -1)
        return 0
    data = PyUnicode_AsUTF8AndSize(text, &size)
    if flexible:
        _uvarint(out, <unsigned long long>size + 1)
    else:
        _be16(out, size)
    _raw(out, data, size)
    return 0


cdef bytes _take(_Out* out):
    cdef bytes piece = PyBytes_FromStringAndSize(out.buf, out.n)
    out.n = 0
    return piece


def request_parts(
    int version,
    long long correlation_id,
    bytes client_id,
    transactional_id,
    int acks,
    long long timeout_ms,
    by_topic,
):
    """A whole produce request, size prefix included, as buffers for ``writelines``: see
    :func:`aioaccum._kafka.produce.request_parts`, which this matches byte for byte."""
    cdef bint flexible = version >= 9
    cdef _Out out
    cdef list parts = []
    cdef list partitions
    cdef object chunks
    cdef Py_ssize_t size = 0, length, i, n
    cdef bytes first
    cdef unsigned char* p
    if type(by_topic) is not dict:
        by_topic = dict(by_topic)
    out.cap = 256
    out.n = 0
    out.buf = <char*>malloc(out.cap)
    if out.buf == NULL:
        raise MemoryError()
    try:
        _be32(&out, 0)  # the size, set at the end
        _be16(&out, 0)  # the produce request's api key
        _be16(&out, version)
        _be32(&out, correlation_id)
        _be16(&out, PyBytes_GET_SIZE(client_id))
        _raw(&out, PyBytes_AS_STRING(client_id), PyBytes_GET_SIZE(client_id))
        if flexible:
            _uvarint(&out, 0)  # the request header's tags
        _string(&out, transactional_id, flexible)
        _be16(&out, acks)
        _be32(&out, timeout_ms)
        if flexible:
            _uvarint(&out, <unsigned long long>len(by_topic) + 1)
        else:
            _be32(&out, len(by_topic))
        for topic, partitions_obj in (<dict>by_topic).items():
            partitions = partitions_obj if type(partitions_obj) is list else list(partitions_obj)
            _string(&out, topic, flexible)
            if flexible:
                _uvarint(&out, <unsigned long long>len(partitions) + 1)
            else:
                _be32(&out, len(partitions))
            for entry in partitions:
                partition, chunks = entry
                n = len(chunks)
                length = 0
                for i in range(n):
                    length += len(chunks[i])
                _be32(&out, partition)
                if flexible:
                    _uvarint(&out, <unsigned long long>length + 1)
                else:
                    _be32(&out, length)
                size += out.n + length
                parts.append(_take(&out))
                parts.extend(chunks)
                if flexible:
                    _uvarint(&out, 0)  # the partition's tags
            if flexible:
                _uvarint(&out, 0)  # the topic's tags
        if flexible:
            _uvarint(&out, 0)  # the request's tags
        if out.n:
            size += out.n
            parts.append(_take(&out))
    finally:
        free(out.buf)
    # The first piece is a new bytes object nobody else holds yet: its size is set in place.
    first = <bytes>parts[0]
    p = <unsigned char*>PyBytes_AS_STRING(first)
    size -= 4
    p[0] = (size >> 24) & 0xFF
    p[1] = (size >> 16) & 0xFF
    p[2] = (size >> 8) & 0xFF
    p[3] = size & 0xFF
    return parts


cdef inline long long _load(const unsigned char* p, int width) noexcept:
    cdef long long v = 0
    cdef int i
    for i in range(width):
        v = (v << 8) | p[i]
    # Kafka's integers are signed: extend the sign of a short load.
    if width < 8 and (v >> (8 * width - 1)) & 1:
        v -= (<long long>1) << (8 * width)
    return v


cdef int _need(Py_ssize_t pos, Py_ssize_t width, Py_ssize_t end) except -1:
    if pos + width > end:
        raise ValueError(
            f"a produce answer cut short: {width} bytes wanted at byte {pos} of {end}"
        )
    return 0


def read_answers(int version, bytes body, batches):
    """A produce response v3 to v7's body (after its header) as the sender's answers: see
    :func:`aioaccum._kafka.produce.read_answers`, which this matches (version 12 stays there)."""
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(body)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(body)
    cdef Py_ssize_t pos = 0, skip = 30 if version >= 5 else 22
    cdef Py_ssize_t topics, count, t, k, name_size, cursor = 0, asked
    cdef Py_ssize_t tp_name_size
    cdef const char* tp_name
    cdef long partition
    cdef int code
    cdef long long offset, timestamp
    cdef list asked_list = batches if type(batches) is list else list(batches)
    cdef object out = _ProduceAnswers()
    cdef object key, error, answer, tp, offset_obj, timestamp_obj
    cdef object topic
    cdef const char* name
    asked = len(asked_list)
    _need(pos, 4, end)
    topics = _load(data, 4)
    pos = 4
    for t in range(topics):
        _need(pos, 2, end)
        name_size = _load(data + pos, 2)
        if name_size < 0:
            raise ValueError(f"a produce answer with a topic name of {name_size} bytes")
        _need(pos + 2, name_size, end)
        name = <const char*>data + pos + 2
        topic = None
        pos += 2 + name_size
        _need(pos, 4, end)
        count = _load(data + pos, 4)
        pos += 4
        for k in range(count):
            _need(pos, skip, end)
            partition = <long>_load(data + pos, 4)
            code = <int>_load(data + pos + 4, 2)
            offset = _load(data + pos + 6, 8)
            timestamp = _load(data + pos + 14, 8)
            pos += skip
            # The request's own key when the answer comes in the order asked.
            key = None
            if cursor < asked:
                tp = (<tuple>asked_list[cursor])[0]
                if tp[1] == partition:
                    tp_name = PyUnicode_AsUTF8AndSize(tp[0], &tp_name_size)
                    if tp_name_size == name_size and memcmp(tp_name, name, name_size) == 0:
                        key = tp
                        cursor += 1
            if topic is None:
                topic = tp[0] if key is not None else PyUnicode_DecodeUTF8(
                    name, name_size, NULL
                )
            if key is None:
                key = _new_pair(_TopicPartition, topic, partition)
            error = None
            if code:
                error = broker_error_for_code(
                    code, None, topic=topic,
                    batch_bytes=batch_bytes_of(asked_list, topic, partition),
                )
            answer = aioaccum_new_named(_PartitionResponse, 3)
            Py_INCREF(error)
            PyTuple_SET_ITEM(answer, 0, error)
            offset_obj = offset
            Py_INCREF(offset_obj)
            PyTuple_SET_ITEM(answer, 1, offset_obj)
            timestamp_obj = timestamp
            Py_INCREF(timestamp_obj)
            PyTuple_SET_ITEM(answer, 2, timestamp_obj)
            out[key] = answer
    _need(pos, 4, end)
    out.throttle_time_ms = <int>_load(data + pos, 4)
    return out


cdef object _new_pair(object type, object first, long second):
    cdef object pair = aioaccum_new_named(type, 2)
    cdef object number = second
    Py_INCREF(first)
    PyTuple_SET_ITEM(pair, 0, first)
    Py_INCREF(number)
    PyTuple_SET_ITEM(pair, 1, number)
    return pair
