"""The exactly-once commits of the Spark sinks, on the driver: shared by ``write_dataframe``
and the ``aioaccum`` data source's batch writer.

Each Spark partition ``i`` writes in a transaction of ``f"{prefix}-{i}"``, which its task
prepares and hands to the driver; the driver commits them all once the job succeeded, or
aborts every id of the write when it failed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aioaccum._runtime.transactions import abort_transactional_ids, commit_prepared
from aioaccum.errors import AioAccumError, ConfigError, TransactionError
from aioaccum.spark.rows import run_coroutine

if TYPE_CHECKING:
    from aioaccum._runtime.transactions import PreparedTransaction

__all__ = ["CommitFailed", "Transactions"]

# The driver aborts instead of committing when the job took more than this share of the
# transaction timeout: the broker may have aborted the oldest transactions already, and a
# commit that met one of them would leave part of the output committed.
_COMMIT_WITHIN = 0.9
_INVALID_TRANSACTION_TIMEOUT = 50  # Kafka's error code


# --- exactly once --------------------------------------------------------------------------


class CommitFailed(AioAccumError):
    """The driver could not commit every prepared transaction; the message says why."""


class Transactions:
    """``exactly_once=True``, in the driver: the prepared transactions of one write, which it
    commits only after the Spark job succeeded, and the ids it aborts otherwise.

    Partition ``i`` writes as ``f"{prefix}-{i}"``; ``partitions`` is set before any Spark job
    runs, so that a failure aborts every id a task may have used.
    """

    def __init__(self, prefix: str, settings: Mapping[str, Any], started: float) -> None:
        self.prefix = prefix
        self.settings = dict(settings)
        self.timeout_ms = int(settings["transaction_timeout_ms"])
        self.started = started
        self.partitions = 0
        self.prepared: list[tuple[int, PreparedTransaction]] = []
        self.committed: list[str] = []
        """Transactional ids committed so far (all of them once commit() returned)."""

    def ids(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.partitions)]

    def check(self) -> None:
        """Before any Spark job: whether the brokers take ``transaction_timeout_ms``.

        InitProducerId with ``<prefix>-0``, which also aborts what an earlier write with this
        prefix left open there, fails the call in the driver rather than every task.
        """
        settings = self.settings
        try:
            run_coroutine(lambda: abort_transactional_ids([f"{self.prefix}-0"], **settings))
        except TransactionError as exc:
            if exc.errno != _INVALID_TRANSACTION_TIMEOUT:
                raise
            raise ConfigError(
                f"exactly_once=True: the brokers refuse transaction_timeout_ms="
                f"{self.timeout_ms} (above their transaction.max.timeout.ms, 900000 unless "
                "changed). Each partition's transaction stays open from its first row until "
                "the driver commits after the whole Spark job, so the timeout must cover the "
                "job: pass a transaction_timeout_ms the brokers allow (and keep the job "
                "shorter), or raise transaction.max.timeout.ms on the brokers"
            ) from exc

    def commit(self) -> int:
        """Commit every prepared transaction, oldest partitions first; returns how many
        (empty ones need no commit).

        Raises:
            CommitFailed: The job outlasted most of ``transaction_timeout_ms`` (nothing is
                committed then), or a commit was refused (those before it are committed).
        """
        by_task: dict[int, PreparedTransaction] = {}
        for task, prepared in self.prepared:
            expected = f"{self.prefix}-{task}"
            if (
                prepared.transactional_id != expected
                or task in by_task
                or not 0 <= task < self.partitions
            ):
                raise CommitFailed(
                    f"exactly_once=True: partition {task} handed back the transaction "
                    f"{prepared.transactional_id!r} (expected {expected!r}, once); nothing was "
                    "committed, and every transaction of the write was aborted"
                )
            by_task[task] = prepared
        elapsed = time.monotonic() - self.started
        budget = self.timeout_ms / 1000 * _COMMIT_WITHIN
        if elapsed > budget:
            raise CommitFailed(
                f"exactly_once=True: the Spark job took {elapsed:.0f} s, more than "
                f"{_COMMIT_WITHIN:.0%} of transaction_timeout_ms={self.timeout_ms}, so the "
                "brokers may already have aborted its oldest transactions; nothing was "
                f"committed, and the transactions of all {self.partitions} partitions were "
                "aborted. Pass a larger transaction_timeout_ms (at most the brokers' "
                "transaction.max.timeout.ms, 900000 unless changed), or make the job shorter"
            )
        ordered = [by_task[task] for task in sorted(by_task)]
        settings = self.settings
        committed = self.committed

        def note(item: PreparedTransaction) -> None:
            committed.append(item.transactional_id)

        try:
            return run_coroutine(
                lambda: commit_prepared(ordered, on_committed=note, **settings)
            )
        except Exception as exc:
            if committed:
                part = (
                    f"{len(committed)} of them ({', '.join(committed)}) are committed, so the "
                    "topic holds part of the output; running the write again would write "
                    "those partitions a second time"
                )
            else:
                part = "none was committed"
            raise CommitFailed(
                f"exactly_once=True: the Spark job succeeded, but committing its {len(ordered)} "
                f"transaction(s) failed after {elapsed:.0f} s: {exc}. {part}; the others were "
                "aborted. A transaction is refused when it was aborted meanwhile: a later "
                "producer used its id (another write with the same transactional_id_prefix, "
                "or a speculative task), or it stayed open longer than "
                f"transaction_timeout_ms={self.timeout_ms}"
            ) from exc

    def abort_after(self, error: BaseException) -> None:
        """Abort every id of the write, after ``error`` ended it; a failure to abort is noted
        on ``error`` (which the caller raises) rather than hiding it."""
        if not self.partitions:
            return
        ids = self.ids()
        settings = self.settings
        try:
            run_coroutine(lambda: abort_transactional_ids(ids, **settings))
        except Exception as exc:
            error.add_note(
                f"aioaccum: aborting the transactions {ids[0]!r}…{ids[-1]!r} failed too "
                f"({type(exc).__name__}: {exc}); the brokers abort them after "
                f"transaction_timeout_ms={self.timeout_ms}, and a write with the same "
                "transactional_id_prefix aborts them when it starts"
            )
