"""Lifecycles as enums with their allowed moves written down (Kafka's ``TransactionManager.State``).

Each long-lived object (the producer, its sender, the synchronous facade) keeps one state from
an :class:`enum.Enum` and changes it only through :func:`move`, which refuses a move its table
does not list. A wrong move is a bug in aioaccum, so it is an ``AssertionError``-like
``RuntimeError`` that names both states, not something a user handles.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

__all__ = ["IllegalStateTransition", "ProducerState", "move"]

S = TypeVar("S", bound=enum.Enum)


class ProducerState(enum.Enum):
    """The producer's lifecycle (its moves are in ``aioaccum.producer``); here, beneath the
    facade, so that what reports on a producer can tell a running one without importing it."""

    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class IllegalStateTransition(RuntimeError):
    """A lifecycle was asked to make a move its table does not allow."""


def move(owner: str, current: S, new: S, allowed: Mapping[S, frozenset[S]]) -> S:
    """Return ``new`` if ``current -> new`` is in ``allowed``; raise otherwise.

    Staying in the same state is always allowed, so repeated calls (a second ``close()``) need
    no special case.
    """
    if new is current or new in allowed.get(current, frozenset()):
        return new
    raise IllegalStateTransition(f"{owner} cannot go from {current.name} to {new.name}")
