"""The side-by-side producer benchmark behind ``scripts/bench``.

``spec``          workloads and the settings handed to each contender's process
``clients``       the asyncio Python contenders, as they run inside their own child process
``sync_clients``  the synchronous ones (confluent-kafka's Producer, kafka-python), likewise
``child``         a contender's child process: runs the runner its spec names, writes the result
``contenders``    the registry: which contenders exist, which are installed, the Java command
``harness``       the broker (cluster, topics, end offsets, quotas) and measuring a child process
``runner``        the command line and the interleaved runs
``report``        docs/benchmarks.md and its charts, from the JSON results
"""
