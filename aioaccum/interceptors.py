"""Interceptors (Java's ``ProducerInterceptor``); :mod:`aioaccum._runtime.hooks` runs them."""

from aioaccum._runtime.hooks import ProducerInterceptor, ProducerRecord

__all__ = ["ProducerInterceptor", "ProducerRecord"]
