"""Kafka's error codes by name, and what the sender does about each one.

:class:`Errors` is the part of Kafka's ``Errors`` enum a producer meets. :data:`RULES` is the one
place that says how the sender answers a failed batch: retry it, split it, start a new producer
epoch, or fail it, and whether the cluster metadata must be refreshed first. The sender applies
the table, and :func:`rule_for` is what tests read instead of repeating numbers.

Codes that are not in the enum (and errors that are not the broker's answer, such as a lost
connection, whose code is -1) follow the ``retriable`` and ``invalid_metadata`` flags of the
error the network layer built for them.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import NamedTuple

from aioaccum.errors import BrokerError, TransactionError

__all__ = ["RULES", "Decision", "Errors", "Rule", "advice", "retriable", "rule_for"]


class Errors(enum.IntEnum):
    """Kafka error codes a produce or InitProducerId answer can carry (Kafka's ``Errors``)."""

    NONE = 0
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90


class Decision(enum.Enum):
    """What happens to a batch after its answer."""

    SUCCEED = "succeed"
    """Written: complete its records (a duplicate is a batch written by an earlier attempt)."""
    RETRY = "retry"
    """Send it again after a backoff, at the head of its partition's queue."""
    SPLIT = "split"
    """Too large for the broker: split it into batches of ``batch_size`` and send those."""
    BUMP_EPOCH = "bump_epoch"
    """The broker lost track of this producer's sequences: take a new epoch, then retry."""
    FAIL = "fail"
    """Fail its records with the error."""


class Rule(NamedTuple):
    """One row of the table."""

    decision: Decision
    refresh_metadata: bool = False
    """The error means the cached leaders are stale."""


_RETRY = Rule(Decision.RETRY)
_RETRY_AFTER_METADATA = Rule(Decision.RETRY, refresh_metadata=True)
_FAIL = Rule(Decision.FAIL)

RULES = MappingProxyType(
    {
        Errors.NONE: Rule(Decision.SUCCEED),
        Errors.DUPLICATE_SEQUENCE_NUMBER: Rule(Decision.SUCCEED),
        Errors.MESSAGE_TOO_LARGE: Rule(Decision.SPLIT),
        # The three answers after which the broker's idea of our sequences is not ours.
        Errors.OUT_OF_ORDER_SEQUENCE_NUMBER: Rule(Decision.BUMP_EPOCH),
        Errors.INVALID_PRODUCER_EPOCH: Rule(Decision.BUMP_EPOCH),
        Errors.UNKNOWN_PRODUCER_ID: Rule(Decision.BUMP_EPOCH),
        # Leadership moved or is moving: ask for new metadata before the retry goes out.
        Errors.UNKNOWN_TOPIC_OR_PARTITION: _RETRY_AFTER_METADATA,
        Errors.LEADER_NOT_AVAILABLE: _RETRY_AFTER_METADATA,
        Errors.NOT_LEADER_OR_FOLLOWER: _RETRY_AFTER_METADATA,
        Errors.REPLICA_NOT_AVAILABLE: _RETRY_AFTER_METADATA,
        Errors.NETWORK_EXCEPTION: _RETRY_AFTER_METADATA,
        Errors.KAFKA_STORAGE_ERROR: _RETRY_AFTER_METADATA,
        Errors.FENCED_LEADER_EPOCH: _RETRY_AFTER_METADATA,
        Errors.UNKNOWN_LEADER_EPOCH: _RETRY_AFTER_METADATA,
        # Transient on the broker's side; the same leader may take the batch next time.
        Errors.CORRUPT_MESSAGE: _RETRY,
        Errors.REQUEST_TIMED_OUT: _RETRY,
        Errors.NOT_ENOUGH_REPLICAS: _RETRY,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: _RETRY,
        Errors.COORDINATOR_LOAD_IN_PROGRESS: _RETRY,
        Errors.COORDINATOR_NOT_AVAILABLE: _RETRY,
        Errors.NOT_COORDINATOR: _RETRY,
        Errors.CONCURRENT_TRANSACTIONS: _RETRY,
        Errors.THROTTLING_QUOTA_EXCEEDED: _RETRY,
        # Retrying cannot help: the request, the data or the permissions are wrong.
        Errors.BROKER_NOT_AVAILABLE: _FAIL,
        Errors.INVALID_TOPIC_EXCEPTION: _FAIL,
        Errors.RECORD_LIST_TOO_LARGE: _FAIL,
        Errors.INVALID_REQUIRED_ACKS: _FAIL,
        Errors.TOPIC_AUTHORIZATION_FAILED: _FAIL,
        Errors.CLUSTER_AUTHORIZATION_FAILED: _FAIL,
        Errors.INVALID_TIMESTAMP: _FAIL,
        Errors.UNSUPPORTED_VERSION: _FAIL,
        Errors.POLICY_VIOLATION: _FAIL,
        Errors.INVALID_TXN_STATE: _FAIL,
        Errors.INVALID_PRODUCER_ID_MAPPING: _FAIL,
        Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: _FAIL,
        Errors.UNSUPPORTED_COMPRESSION_TYPE: _FAIL,
        Errors.INVALID_RECORD: _FAIL,
        Errors.PRODUCER_FENCED: _FAIL,
    }
)
"""Every named code's rule; a test checks that none is missing."""


def rule_for(error: BaseException) -> Rule:
    """The rule for a batch that failed with ``error``.

    A broker error with a named code follows :data:`RULES`; any other broker error (a code this
    table does not know, a lost connection) follows its own flags; an error that is not the
    broker's (a request timeout) is retried, since the broker may simply not have answered yet.
    """
    if not isinstance(error, BrokerError):
        # A transaction step refused (adding the partitions): the transaction must abort.
        return _FAIL if isinstance(error, TransactionError) else _RETRY
    code = error.errno
    if code in _NAMED:
        return RULES[Errors(code)]
    if error.retriable:
        return _RETRY_AFTER_METADATA if error.invalid_metadata else _RETRY
    return _FAIL


_NAMED = frozenset(int(code) for code in Errors)


def retriable(code: int) -> bool | None:
    """Whether sending the same batch again may succeed after this code (the ``retriable`` of
    the error users see); ``None`` for a code this table does not name."""
    if code not in _NAMED:
        return None
    return RULES[Errors(code)].decision in (Decision.RETRY, Decision.BUMP_EPOCH)


def advice(code: int, *, topic: str | None = None, batch_bytes: int | None = None) -> str | None:
    """What a refusal that no retry can get past means, and what to change; None for a code
    with nothing to add.

    Produce answers up to v7 (the newest aiokafka speaks) carry only the code, not the broker's
    reason, so this is all the user learns. ``topic`` and ``batch_bytes`` (the refused batch's
    size) are named when known.
    """
    where = "the topic" if topic is None else f"topic {topic!r}"
    batch = "the batch" if batch_bytes is None else f"the batch of {batch_bytes} bytes"
    if code == Errors.MESSAGE_TOO_LARGE:
        # A batch of several records is split first (RULES): a user sees this for one record.
        return (
            f"{batch} is larger than {where} accepts (its max.message.bytes, else the "
            "broker's message.max.bytes), and a batch of one record cannot be split further; "
            f"send smaller records, or raise max.message.bytes on {where}"
        )
    if code == Errors.RECORD_LIST_TOO_LARGE:
        return (
            f"{batch} is larger than a log segment of {where} (segment.bytes); send smaller "
            f"records, or raise segment.bytes on {where}"
        )
    if code == Errors.INVALID_RECORD:
        return (
            f"the broker refused a record of the batch as invalid; {where} may be compacted "
            "(cleanup.policy=compact), and a compacted topic needs a key on every record: "
            "give every record a key, or send to a topic that is not compacted"
        )
    if code == Errors.INVALID_TIMESTAMP:
        return (
            f"a record's timestamp is further from the broker's clock than {where} allows "
            "(message.timestamp.before.max.ms into the past, message.timestamp.after.max.ms "
            "into the future); send current timestamps (timestamp_ms=None stamps the time of "
            f"sending), or widen those settings on {where}"
        )
    if code == Errors.TOPIC_AUTHORIZATION_FAILED:
        return (
            f"not authorized to write to {where}: the principal this producer authenticates "
            "as needs an ACL allowing WRITE and DESCRIBE on it, and no ACL denying them"
        )
    return None
