"""Recycled segments: a segment that owes nothing becomes the spare, and the spare the next
segment, without its old entries ever reading back as records."""

from __future__ import annotations

import shutil
from pathlib import Path

from aioaccum._journal.journal import Journal
from aioaccum._journal.segment import SPARE, SUFFIX

SEGMENT = 4096
VALUE = b"v" * 200  # about 18 records a segment


def _open(folder: Path) -> Journal:
    return Journal.open(folder, segment_bytes=SEGMENT, max_bytes=1 << 20)


def _segments(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))


def _fill(journal: Journal, records: int, partition: int = 0) -> list[int]:
    # Sizes vary, so that entries of one use of a file do not line up with the last one's.
    return [journal.append("t", partition, 1, None, VALUE[:150 + 37 * (i % 3)])
            for i in range(records)]


def test_a_settled_segment_is_reused_and_its_old_records_never_come_back(
        tmp_path: Path) -> None:
    journal = _open(tmp_path)
    seqs: list[int] = []
    settled = 0
    for _ in range(6):  # each round writes about two segments and settles all but the last
        for _ in range(40):
            seqs += _fill(journal, 1)
            # A recycled segment reads as a fresh one: zeros after its last entry.
            head = journal.head
            assert head is not None
            tail = head.path.read_bytes()[head.write_pos:]
            assert tail == bytes(SEGMENT - head.write_pos), (head.first_seq, head.write_pos)
        journal.done("t", 0, seqs[settled], seqs[-6], len(seqs) - 5 - settled)
        settled = len(seqs) - 5
    assert journal.recycled >= 3
    # A crash now: the files as they are (what the page cache holds) are all a restart has.
    copy = tmp_path.parent / "copy"
    shutil.copytree(tmp_path, copy, ignore=shutil.ignore_patterns("*.lock"))
    owed_now = seqs[settled:]
    journal.close()
    assert not (tmp_path / SPARE).exists()  # close lets the spare go

    for folder in (tmp_path, copy):
        again = _open(folder)
        assert [r.seq for r in again.recovery.records] == owed_now
        assert again.recovery.problems == []
        assert not (folder / SPARE).exists()  # a crash's spare is discarded at open
        again.close()


def test_records_in_a_recycled_segment_survive_a_restart_with_their_fields(
        tmp_path: Path) -> None:
    journal = _open(tmp_path)
    first = _fill(journal, 40)
    journal.done("t", 0, first[0], first[-1], 40)
    later = [journal.append("t", 1, 7, b"key%d" % i, VALUE + b"%d" % i, [("h", b"%d" % i)])
             for i in range(30)]  # on into the spare made of a settled segment
    assert journal.recycled >= 1
    journal.close()
    again = _open(tmp_path)
    got = [(r.seq, r.partition, r.key, r.value, r.headers) for r in again.recovery.records]
    assert got == [(s, 1, b"key%d" % i, VALUE + b"%d" % i, (("h", b"%d" % i),))
                   for i, s in enumerate(later)]
    again.close()


def test_without_recycling_settled_segments_are_deleted(tmp_path: Path) -> None:
    """A journal_sync that survives power loss does not recycle: its zeros would have to be
    synced too."""
    journal = Journal.open(tmp_path, segment_bytes=SEGMENT, max_bytes=1 << 20, recycle=False)
    for _ in range(3):
        seqs = _fill(journal, 40)
        journal.done("t", 0, seqs[0], seqs[-1], 40)
    assert journal.recycled == 0
    assert not (tmp_path / SPARE).exists()
    assert len(_segments(tmp_path)) == 1
    journal.close()


def test_runs_of_one_partition_are_counted_as_single_records_are(tmp_path: Path) -> None:
    """Appends that pass the same ``tp`` object in a row are counted by a run counter; the
    counts must come out as if each record were counted alone, however runs, settles and
    segment rolls interleave (checked against the owed records a restart finds)."""
    import random

    rng = random.Random(7)
    journal = _open(tmp_path)
    tps = [("t", 0), ("t", 1), ("t", 2)]
    owed: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for _step in range(400):
        partition = rng.choice((0, 0, 0, 1, 2))  # long runs of 0, short ones of the others
        tp = tps[partition] if rng.random() < 0.9 else ("t", partition)  # equal, not the same
        for _ in range(rng.randint(1, 12)):
            owed[partition].append(
                journal.append("t", partition, 1, None, VALUE[:rng.randint(1, 200)], (), tp))
        if rng.random() < 0.3:
            keep = rng.randint(0, 3)
            settled = owed[partition][:max(0, len(owed[partition]) - keep)]
            if settled:
                journal.done("t", partition, settled[0], settled[-1], len(settled))
                del owed[partition][:len(settled)]
    assert journal.recycled >= 1
    journal.close()
    again = _open(tmp_path)
    assert sorted(r.seq for r in again.recovery.records) == sorted(
        s for seqs in owed.values() for s in seqs)
    for partition, seqs in owed.items():  # and every settled segment went
        if seqs:
            again.done("t", partition, seqs[0], seqs[-1], len(seqs))
    assert len(_segments(tmp_path)) == 1
    again.close()


def test_segments_stay_mapped_for_recycling_as_far_back_as_mapped_says(tmp_path: Path) -> None:
    """Outcomes that come while more than one segment owes (a producer with a full
    buffer_memory) recycle the oldest only if it is still mapped: with two maps it was let
    go when the third segment began, and is deleted; with three it becomes the spare."""
    for mapped, recycled in ((2, 0), (3, 1)):
        folder = tmp_path / f"mapped-{mapped}"
        journal = Journal.open(folder, segment_bytes=SEGMENT, max_bytes=1 << 20, mapped=mapped)
        seqs = _fill(journal, 50)  # about three segments, all owing
        assert len(_segments(folder)) == 3
        first = journal.head
        journal.done("t", 0, seqs[0], seqs[19], 20)  # the oldest segment owes nothing now
        _fill(journal, 30)  # on into a fourth segment
        assert journal.head is not first
        assert journal.recycled == recycled, mapped
        journal.close()
        again = _open(folder)
        assert [r.seq for r in again.recovery.records][:30] == seqs[20:50]
        again.close()


def test_a_producer_maps_what_a_full_buffer_memory_owes_within_bounds() -> None:
    from aioaccum._runtime.journaling import MOST_MAPPED, mapped_segments

    mib = 1 << 20
    assert mapped_segments(32 * mib, 16 * mib) == MOST_MAPPED == 4  # the defaults
    assert mapped_segments(2 * mib, 4 * mib) == 2  # never fewer than today's two
    assert mapped_segments(16 * mib, 16 * mib) == 3
    assert mapped_segments(1 << 30, 16 * mib) == MOST_MAPPED  # an outage's maps stay bounded
