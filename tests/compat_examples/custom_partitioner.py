# From aio-libs/aiokafka, docs/examples/custom_partitioner.rst (the producer block), at commit 672947afe85c91b7d953f0259e69837a711d3246.
# Copyright the aiokafka authors; Apache License 2.0
# (https://github.com/aio-libs/aiokafka/blob/master/LICENSE).
# Changed: only the import line (from aiokafka to from aioaccum.compat).
# ruff: noqa
# mypy: ignore-errors
import asyncio
import random
from aioaccum.compat import AIOKafkaProducer

def my_partitioner(key, all_partitions, available_partitions):
   if key == b'first':
       return all_partitions[0]
   elif key == b'last':
       return all_partitions[-1]
   return random.choice(all_partitions)

async def produce_one(producer, key, value):
    future = await producer.send('foobar', value, key=key)
    resp = await future
    print("'%s' produced in partition: %i"%(value.decode(), resp.partition))

async def produce_task():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092',
        partitioner=my_partitioner)

    await producer.start()
    await produce_one(producer, b'last', b'1')
    await produce_one(producer, b'some', b'2')
    await produce_one(producer, b'first', b'3')
    await producer.stop()

asyncio.run(produce_task())
