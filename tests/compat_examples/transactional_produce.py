# From aio-libs/aiokafka, examples/transactional_produce.py, at commit 672947afe85c91b7d953f0259e69837a711d3246.
# Copyright the aiokafka authors; Apache License 2.0
# (https://github.com/aio-libs/aiokafka/blob/master/LICENSE).
# Changed: only the import line (from aiokafka to from aioaccum.compat).
# ruff: noqa
# mypy: ignore-errors
from aioaccum.compat import AIOKafkaProducer
import asyncio

async def send_one():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092',
        transactional_id="transactional_test")

    # Get cluster layout and topic/partition allocation
    await producer.start()
    try:
        async with producer.transaction():
            # Produce messages
            res = await producer.send_and_wait(
                "test-topic", b"Super transactional message")
            input()
            raise ValueError()
    finally:
        await producer.stop()
    print(res)

asyncio.run(send_one())
