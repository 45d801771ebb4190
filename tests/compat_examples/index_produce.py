# From aio-libs/aiokafka, docs/index.rst ("AIOKafkaProducer" section), at commit 672947afe85c91b7d953f0259e69837a711d3246.
# Copyright the aiokafka authors; Apache License 2.0
# (https://github.com/aio-libs/aiokafka/blob/master/LICENSE).
# Changed: only the import line (from aiokafka to from aioaccum.compat).
# ruff: noqa
# mypy: ignore-errors
from aioaccum.compat import AIOKafkaProducer
import asyncio

async def send_one():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092')
    # Get cluster layout and initial topic/partition leadership information
    await producer.start()
    try:
        # Produce message
        await producer.send_and_wait("my_topic", b"Super message")
    finally:
        # Wait for all pending messages to be delivered or expire.
        await producer.stop()

asyncio.run(send_one())
