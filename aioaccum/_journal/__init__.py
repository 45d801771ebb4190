"""The producer's write-ahead journal on disk: segment files of checksummed entries.

This layer knows files, not Kafka connections or the event loop: the runtime decides when to
write, seal and forget records; this package makes each of those steps durable and reads them
back after a crash.
"""
