"""Run one of aiokafka's examples (copied here) against the test cluster.

aiokafka's examples connect to a broker on localhost:9092, which the docs assume. This runner
points every producer and consumer they make at the cluster given instead (their
``bootstrap_servers`` is replaced, nothing else), then runs the example as ``__main__``.

Usage: ``python tests/compat_examples/_run.py BOOTSTRAP EXAMPLE.py``
"""

from __future__ import annotations

import runpy
import signal
import sys
from typing import Any

from aioaccum import compat


def main(bootstrap: str, example: str) -> None:
    class Producer(compat.AIOKafkaProducer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**{**kwargs, "bootstrap_servers": bootstrap})

    class Consumer(compat.AIOKafkaConsumer):  # type: ignore[misc]  # aiokafka is untyped here
        def __init__(self, *topics: str, **kwargs: Any) -> None:
            super().__init__(*topics, **{**kwargs, "bootstrap_servers": bootstrap})

    setattr(compat, "AIOKafkaProducer", Producer)  # noqa: B010  # what the example imports
    setattr(compat, "AIOKafkaConsumer", Consumer)  # noqa: B010
    sys.argv = [example]
    # The tests stop an example with Ctrl-C's signal, as a person would. A test run started in
    # the background of a shell without job control (`cmd &` in a script) inherits SIGINT
    # ignored, and then neither Python nor asyncio.run would turn it into a stop: the example
    # would run on until killed. A terminal's default, restored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    runpy.run_path(example, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
