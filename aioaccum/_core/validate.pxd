# Compiled declarations for validate.py; see futures.pxd. checked_timestamp is on every record's
# path: declared here, the producer calls it as a C function.

cpdef object checked_timestamp(object timestamp_ms)
