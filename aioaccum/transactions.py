"""Public home of the transaction API: prepared transactions and the commits made elsewhere."""

from aioaccum._runtime.transactions import (
    PreparedTransaction,
    Transactions,
    TxnState,
    abort_transactional_ids,
    commit_prepared,
)

__all__ = [
    "PreparedTransaction",
    "Transactions",
    "TxnState",
    "abort_transactional_ids",
    "commit_prepared",
]
