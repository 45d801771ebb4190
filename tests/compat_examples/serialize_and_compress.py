# From aio-libs/aiokafka, docs/examples/serialize_and_compress.rst (the producer block), at commit 672947afe85c91b7d953f0259e69837a711d3246.
# Copyright the aiokafka authors; Apache License 2.0
# (https://github.com/aio-libs/aiokafka/blob/master/LICENSE).
# Changed: only the import line (from aiokafka to from aioaccum.compat).
# ruff: noqa
# mypy: ignore-errors
import json
import asyncio
from aioaccum.compat import AIOKafkaProducer

def serializer(value):
    return json.dumps(value).encode()

async def produce():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092',
        value_serializer=serializer,
        compression_type="gzip")

    await producer.start()
    data = {"a": 123.4, "b": "some string"}
    await producer.send('foobar', data)
    data = [1,2,3,4]
    await producer.send('foobar', data)
    await producer.stop()

asyncio.run(produce())
