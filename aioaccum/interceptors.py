"""Interceptors (Java's ``ProducerInterceptor``); :mod:`aioaccum._runtime.hooks` runs them."""

from aioaccum._core.interceptor_api import ProducerInterceptor, ProducerRecord

__all__ = ["ProducerInterceptor", "ProducerRecord"]
