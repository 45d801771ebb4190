"""A producer process with a journal, for kill -9 tests.

    python journal_child.py BOOTSTRAP TOPIC JOURNAL_DIR FIRST_ID COUNT RETURNED_FILE

Starts a producer on JOURNAL_DIR (re-sending what an earlier process left owed) and prints
``recovered N``, then offers records FIRST_ID .. FIRST_ID+COUNT-1 flat out, appending each id to
RETURNED_FILE once its ``send()`` returned (line-buffered: a kill -9 loses no line written), and
to RETURNED_FILE.offered before the call. With COUNT 0 it only recovers, flushes and closes, and
prints ``at-least-once M``: recovered records that went under the new producer id.
"""

from __future__ import annotations

import asyncio
import sys

from aioaccum import Producer
from faults.workload import record_value


async def main(bootstrap: str, topic: str, folder: str, first: int, count: int,
               returned: str) -> None:
    producer = Producer(bootstrap, journal_dir=folder, linger_ms=5, batch_size=16384,
                        buffer_memory=4 << 20)
    await producer.start()
    print(f"recovered {producer.journal_recovered}", flush=True)
    with (open(returned, "a", buffering=1) as out,  # noqa: ASYNC230  (a line per record)
          open(returned + ".offered", "a", buffering=1) as offered):  # noqa: ASYNC230
        for rid in range(first, first + count):
            offered.write(f"{rid}\n")
            await producer.send(topic, record_value(rid, 100), key=b"%d" % (rid % 97))
            out.write(f"{rid}\n")
    await producer.flush()
    await producer.close()
    print(f"at-least-once {producer.journal_at_least_once}", flush=True)


if __name__ == "__main__":
    bootstrap, topic, folder, first, count, returned = sys.argv[1:7]
    asyncio.run(main(bootstrap, topic, folder, int(first), int(count), returned))
