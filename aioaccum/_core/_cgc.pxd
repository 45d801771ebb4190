# The garbage collector's lists, from compiled code.
#
# CPython's collector walks every tracked container on a full collection, and starts one each
# time the containers that survived two younger collections grow by a quarter. An open batch
# and what it holds (its builder, lists, views) live for milliseconds to seconds, long enough
# to be promoted; with keys over thousands of partitions a full collection then ran every few
# thousand batches and took two fifths of the producer's CPU. The objects untracked here hold
# no reference back to whatever holds them, and all of them are dropped when their batch ends,
# so a cycle through one of them (say, a user's callback on a record future that reaches the
# producer) is broken then; the collector never had anything to do for them.
#
# Only for objects whose deallocator tolerates it: lists, tuples and our own classes call
# PyObject_GC_UnTrack, which checks first. memoryviews and bound methods do not (CPython
# unlinks them unchecked and would crash on one already untracked), so they stay tracked.

cdef extern from *:
    """
    static inline void aioaccum_gc_untrack(PyObject *o) {
        if (PyObject_GC_IsTracked(o)) PyObject_GC_UnTrack(o);
    }
    static inline void aioaccum_gc_track(PyObject *o) {
        if (!PyObject_GC_IsTracked(o)) PyObject_GC_Track(o);
    }
    """
    void gc_untrack "aioaccum_gc_untrack"(object o)
    void gc_track "aioaccum_gc_track"(object o)
