"""The asyncio runtime: the pool, the sender task, transactions, hooks and waits.

It owns every asyncio object, and speaks Kafka only through :mod:`aioaccum._kafka`.
"""
