# Compiled declarations for validate.py; see futures.pxd. checked_timestamp is on every record's
# path: declared here, the producer calls it as a C function.

cpdef object checked_timestamp(object timestamp_ms)

# The system clock in ms, as time.time_ns() // 1_000_000 computes it, read without Python calls.
cdef extern from *:
    """
    static inline long long aioaccum_system_clock_ms(void) {
    #if PY_VERSION_HEX >= 0x030D0000
        PyTime_t now;
        if (PyTime_TimeRaw(&now) < 0) { PyErr_Clear(); return 0; }
    #else
        _PyTime_t now = _PyTime_GetSystemClock();
    #endif
        /* floor division, as Python's // (a clock before 1970 is negative) */
        return now >= 0 ? now / 1000000 : -((-now + 999999) / 1000000);
    }
    """
    long long system_clock_ms "aioaccum_system_clock_ms"() nogil

cpdef long long wall_clock_ms()
