"""Kafka on the wire: the aiokafka adapter, request formats, metadata, SASL, error translation.

The only layer that imports aiokafka or writes Kafka's wire format.
"""
