"""Batches pre-stamped under an earlier producer's identity (a journal's recovery after a crash):
they go as stamped, one at a time, before anything of this producer's to their partition, and go
again under this producer's id when the broker no longer knows the old one."""

from __future__ import annotations

import pytest

from aioaccum._core.batch import ProducerBatch
from aioaccum._core.futures import FutureRecordMetadata
from aioaccum._core.kafka_errors import Errors
from aioaccum._core.sender_core import EpochBumped, InitProducerId
from aioaccum.errors import ProducerTimeoutError

from .test_sender_core import T0, TP0, TP1, Answer, Harness, broker, stamp

OLD = (77, 3, 500)  # the crashed producer's id, epoch and the batch's base sequence


def adopted(records: int = 2) -> tuple[Harness, ProducerBatch, list[FutureRecordMetadata]]:
    """A started idempotent core (producer id 1000, epoch 0) whose first batch of t-0 holds
    ``records`` records pre-stamped with ``OLD``, closed as recovery leaves it."""
    h = Harness(idempotent=True)
    futures = h.append(TP0, T0, records)
    [batch] = h.acc._batches[TP0]
    batch.close()
    assert h.txn is not None
    h.txn.adopt(batch, *OLD)
    assert InitProducerId() in h.poll(T0)
    h.core.on_producer_id(1000, 0)
    return h, batch, futures


def test_a_prestamped_batch_goes_under_its_old_identity_and_a_duplicate_is_success() -> None:
    h, old, futures = adopted()
    h.append(TP0, T0)  # this producer's: a batch of its own behind the closed one
    node, sent = h.one_batch(TP0, T0)
    assert sent is old
    assert stamp(sent) == OLD  # the drain did not stamp it again
    assert h.produce(T0) == []  # the partition waits for its answer
    duplicate = broker(Errors.DUPLICATE_SEQUENCE_NUMBER)
    h.core.on_produce_response(node, [sent], {TP0: Answer(duplicate, base_offset=40)}, T0)
    assert [f.result().offset for f in futures] == [40, 41]
    assert h.txn is not None
    assert not h.txn.needs_reset
    assert not h.txn.has_acknowledged(TP0)  # nothing of this producer's id yet
    _, own = h.one_batch(TP0, T0)
    assert stamp(own) == (1000, 0, 0)  # its sequences start at 0, untouched by the old one


def test_prestamped_batches_of_a_partition_go_one_at_a_time_in_order() -> None:
    h, first, _ = adopted()
    assert h.txn is not None
    h.append(TP0, T0)
    [_, second] = h.acc._batches[TP0]
    second.close()
    h.txn.adopt(second, 77, 3, 502)
    node, sent = h.one_batch(TP0, T0)
    assert sent is first
    assert h.produce(T0) == []
    h.core.on_produce_response(node, [first], {TP0: Answer(base_offset=0)}, T0)
    _, sent = h.one_batch(TP0, T0)
    assert sent is second
    assert stamp(second) == (77, 3, 502)


@pytest.mark.parametrize(
    "code",
    [
        Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
        Errors.UNKNOWN_PRODUCER_ID,
        Errors.INVALID_PRODUCER_EPOCH,
    ],
)
def test_a_prestamped_batch_the_broker_does_not_know_goes_again_under_the_current_id(
    code: Errors,
) -> None:
    h, old, futures = adopted(3)
    assert h.txn is not None
    disowned: list[tuple[ProducerBatch, BaseException]] = []
    h.txn.on_disowned = lambda batch, error: disowned.append((batch, error))
    [later] = h.append(TP0, T0)
    node, sent = h.one_batch(TP0, T0)
    h.core.on_produce_response(node, [sent], {TP0: Answer(broker(code))}, T0)
    assert [(b, e.errno) for b, e in disowned] == [(old, code)]  # type: ignore[attr-defined]
    assert not h.txn.needs_reset  # this producer's own sequences are not in question
    assert not any(f.done() for f in futures)
    # At once (no backoff), first in its partition, under this producer's id.
    node, again = h.one_batch(TP0, T0)
    assert again is old
    assert stamp(again) == (1000, 0, 0)
    h.core.on_produce_response(node, [again], {TP0: Answer(base_offset=0)}, T0)
    _, own = h.one_batch(TP0, T0)
    assert stamp(own) == (1000, 0, 3)
    h.core.on_produce_response(node, [own], {TP0: Answer(base_offset=3)}, T0)
    assert later.result().offset == 3


def test_a_new_epoch_of_the_current_id_leaves_prestamped_batches_as_they_are() -> None:
    h, old, futures = adopted()
    node, sent = h.one_batch(TP0, T0)
    # No answer: the broker may have it. Retried later, it must keep its identity.
    timed_out = ProducerTimeoutError("no answer in 30000 ms")
    timed_out.possibly_written = True
    h.core.on_produce_error(node, [sent], timed_out, T0)
    assert old.possibly_written
    h.append(TP1, T0)
    node1, own = h.one_batch(TP1, T0)
    h.core.on_produce_response(node1, [own], {TP1: Answer(broker(Errors.UNKNOWN_PRODUCER_ID))},
                               T0)
    [bumped] = [a for a in h.poll(T0 + 1) if isinstance(a, EpochBumped)]
    assert (bumped.epoch, bumped.dropped) == (1, 0)  # not failed as possibly written
    assert not any(f.done() for f in futures)
    resent = {b.tp: b for r in h.produce(T0 + 1) for b in r.batches}
    assert stamp(resent[TP0]) == OLD
    assert stamp(resent[TP1]) == (1000, 1, 0)


def three_adopted() -> tuple[Harness, list[ProducerBatch], list[FutureRecordMetadata]]:
    """Three batches of two records on t-0, pre-stamped with sequences 500, 502 and 504."""
    h, first, futures = adopted()
    assert h.txn is not None
    batches = [first]
    for sequence in (502, 504):
        futures += h.append(TP0, T0, 2)
        batch = h.acc._batches[TP0][-1]
        batch.close()
        h.txn.adopt(batch, 77, 3, sequence)
        batches.append(batch)
    return h, batches, futures


def test_out_of_order_batches_before_a_duplicate_were_written_and_succeed() -> None:
    # The broker remembers five batches per producer: older ones it wrote come back out of
    # order. The first later batch it recognises proves them written (no gaps in sequences).
    h, batches, futures = three_adopted()
    assert h.txn is not None
    disowned: list[ProducerBatch] = []
    h.txn.on_disowned = lambda batch, _error: disowned.append(batch)
    gap = broker(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
    for expected in batches[:2]:
        node, sent = h.one_batch(TP0, T0)
        assert sent is expected
        h.core.on_produce_response(node, [sent], {TP0: Answer(gap)}, T0)
        assert not any(f.done() for f in futures)  # set aside, not re-sent
    node, last = h.one_batch(TP0, T0)
    assert last is batches[2]
    duplicate = broker(Errors.DUPLICATE_SEQUENCE_NUMBER)
    h.core.on_produce_response(node, [last], {TP0: Answer(duplicate, base_offset=80)}, T0)
    assert all(f.done() and f.exception() is None for f in futures)
    assert disowned == []
    assert not h.txn.has_acknowledged(TP0)
    assert h.produce(T0) == []  # nothing left: no batch went twice
    h.append(TP0, T0)
    _, own = h.one_batch(TP0, T0)
    assert stamp(own) == (1000, 0, 0)


def test_out_of_order_batches_up_to_the_last_go_again_in_order_under_the_current_id() -> None:
    # A gap before them (the batch ahead was never written): none of them can be written
    # under the old id, so all go under this producer's, in their order.
    h, batches, futures = three_adopted()
    assert h.txn is not None
    disowned: list[ProducerBatch] = []
    h.txn.on_disowned = lambda batch, _error: disowned.append(batch)
    gap = broker(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
    for expected in batches:
        node, sent = h.one_batch(TP0, T0)
        assert sent is expected
        h.core.on_produce_response(node, [sent], {TP0: Answer(gap)}, T0)
    assert disowned == batches
    assert not h.txn.needs_reset
    for sequence, expected in zip((0, 2, 4), batches, strict=True):
        node, sent = h.one_batch(TP0, T0)
        assert sent is expected
        assert stamp(sent) == (1000, 0, sequence)
        h.core.on_produce_response(node, [sent], {TP0: Answer(base_offset=sequence)}, T0)
    assert [f.result().offset for f in futures] == list(range(6))
