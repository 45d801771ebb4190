"""The journal's files: append, recover, settle, roll, torn tails, corruption and the lock."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aioaccum._journal import entries
from aioaccum._journal.entries import ENTRY_HEADER, SEGMENT_HEADER
from aioaccum._journal.journal import Journal
from aioaccum._journal.segment import SUFFIX
from aioaccum.errors import (
    JournalError,
    JournalFullError,
    JournalLockedError,
    RecordTooLargeError,
)

SEGMENT = 64 * 1024


def _open(folder: Path, segment: int = SEGMENT, max_bytes: int = 16 * SEGMENT) -> Journal:
    return Journal.open(folder, segment_bytes=segment, max_bytes=max_bytes)


def _segments(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))


def test_records_come_back_in_order_with_every_field(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    first = journal.append("orders", 3, 1_700_000_000_123, b"k1", b"v1", [("h", b"x")])
    second = journal.append("orders", 1, 1_700_000_000_124, None, b"", [("n", None)])
    third = journal.append("audit", 0, 5, b"k3", None)
    assert (first, second, third) == (0, 1, 2)
    journal.close()

    again = _open(tmp_path)
    got = [(r.seq, r.topic, r.partition, r.timestamp, r.key, r.value, r.headers)
           for r in again.recovery.records]
    assert got == [
        (0, "orders", 3, 1_700_000_000_123, b"k1", b"v1", (("h", b"x"),)),
        (1, "orders", 1, 1_700_000_000_124, None, b"", (("n", None),)),
        (2, "audit", 0, 5, b"k3", None, ()),
    ]
    assert again.recovery.problems == []
    # New records continue the numbering rather than reuse a recovered record's number.
    assert again.append("orders", 0, 6, None, b"v") == 3
    again.close()


def test_settled_records_are_not_recovered_and_their_segments_go(tmp_path: Path) -> None:
    journal = _open(tmp_path, segment=4096, max_bytes=1 << 20)
    value = b"v" * 200
    for _ in range(60):  # about 13 KiB of records: four segments
        journal.append("t", 0, 1, None, value)
    journal.append("t", 1, 1, None, value)
    assert len(_segments(tmp_path)) >= 3
    journal.done("t", 0, 0, 59, 60)
    # Only the newest segment stays: the partition-1 record and the outcomes live in it.
    assert len(_segments(tmp_path)) == 1
    journal.close()

    again = _open(tmp_path, segment=4096, max_bytes=1 << 20)
    assert [(r.topic, r.partition, r.seq) for r in again.recovery.records] == [("t", 1, 60)]
    again.done("t", 1, 60, 60, 1)
    again.close()
    final = _open(tmp_path, segment=4096, max_bytes=1 << 20)
    assert final.recovery.records == []
    final.close()


def test_segments_shared_by_partitions_go_once_every_partition_is_settled(
        tmp_path: Path) -> None:
    journal = _open(tmp_path, segment=4096, max_bytes=1 << 20)
    value = b"v" * 200
    for seq in range(60):  # four segments, each holding records of both partitions
        assert journal.append("t", seq % 2, 1, None, value) == seq
    assert len(_segments(tmp_path)) >= 3
    journal.done("t", 0, 0, 58, 30)
    assert len(_segments(tmp_path)) >= 3  # partition 1 still owes in each of them
    journal.done("t", 1, 1, 59, 30)
    assert len(_segments(tmp_path)) == 1  # the newest stays, for the next entry
    journal.close()
    again = _open(tmp_path, segment=4096, max_bytes=1 << 20)
    assert again.recovery.records == []
    again.close()


def test_a_partial_outcome_keeps_the_rest_owed(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    for i in range(10):
        journal.append("t", i % 2, i, None, bytes([i]))
    journal.done("t", 0, 0, 4, 3)  # records 0, 2, 4 of partition 0
    journal.close()
    again = _open(tmp_path)
    assert [r.seq for r in again.recovery.records] == [1, 3, 5, 6, 7, 8, 9]
    again.close()


def test_the_last_seal_of_an_owed_batch_is_recovered(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    for i in range(4):
        journal.append("t", 2, i, None, b"v")
    journal.seal("t", 2, 0, 3, 4, producer_id=77, epoch=0, base_sequence=10)
    journal.seal("t", 2, 0, 3, 4, producer_id=77, epoch=1, base_sequence=0)  # re-stamped
    journal.close()
    again = _open(tmp_path)
    assert [(s.producer_id, s.epoch, s.base_sequence, s.count) for s in again.recovery.sealed] \
        == [(77, 1, 0, 4)]
    again.close()


def test_a_torn_tail_is_cut_off_counted_and_written_over(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    journal.append("t", 0, 1, None, b"kept")
    journal.append("t", 0, 2, None, b"torn")
    journal.close()
    (path,) = _segments(tmp_path)
    data = bytearray(path.read_bytes())
    # Find the second record's entry and damage its last payload byte, as a write cut short.
    pos = SEGMENT_HEADER.size
    offsets = []
    while data[pos:pos + ENTRY_HEADER.size] != bytes(ENTRY_HEADER.size):
        length, _crc, kind = ENTRY_HEADER.unpack_from(data, pos)
        if kind == entries.RECORD:
            offsets.append(pos)
        pos += ENTRY_HEADER.size + length
    torn_at = offsets[1]
    data[pos - 6:pos] = bytes(6)  # the write stopped six bytes short
    path.write_bytes(bytes(data))

    again = _open(tmp_path)
    assert [r.value for r in again.recovery.records] == [b"kept"]
    (problem,) = again.recovery.problems
    assert problem.torn
    assert problem.offset == torn_at
    assert problem.segment == path.name
    assert again.recovery.torn_entries == 1
    again.append("t", 0, 3, None, b"after")
    again.close()
    final = _open(tmp_path)
    assert [r.value for r in final.recovery.records] == [b"kept", b"after"]
    assert final.recovery.problems == []
    final.close()


def test_corruption_in_the_middle_is_reported_and_never_read(tmp_path: Path) -> None:
    journal = _open(tmp_path)
    for value in (b"one", b"two", b"three"):
        journal.append("t", 0, 1, None, value)
    journal.close()
    (path,) = _segments(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.index(b"two")
    data[at] ^= 0xFF  # a flipped bit in the middle record's value
    path.write_bytes(bytes(data))

    again = _open(tmp_path)
    assert [r.value for r in again.recovery.records] == [b"one", b"three"]
    (problem,) = again.recovery.corrupt_entries
    assert not problem.torn
    assert problem.segment == path.name
    assert problem.reason == "CRC-32C mismatch"
    assert problem.offset < at < problem.offset + problem.size
    again.close()


def test_max_bytes_refuses_records_but_never_outcomes(tmp_path: Path) -> None:
    journal = _open(tmp_path, segment=4096, max_bytes=8192)
    value = b"x" * 1000
    accepted = 0
    refused: JournalFullError | None = None
    for _ in range(100):
        try:
            journal.append("t", 0, 1, None, value)
        except JournalFullError as exc:
            refused = exc
            break
        accepted += 1
    assert refused is not None
    assert "journal_max_bytes=8192" in str(refused)
    assert 4 <= accepted < 9
    # The outcome still goes in, frees the old segments, and records are taken again.
    journal.done("t", 0, 0, accepted - 1, accepted)
    journal.append("t", 0, 1, None, value)
    journal.close()


def test_an_entry_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    journal = _open(tmp_path, segment=4096)
    with pytest.raises(RecordTooLargeError, match="journal_segment_bytes=4096"):
        journal.append("t", 0, 1, None, b"x" * 5000)
    journal.close()


def test_a_second_producer_on_the_folder_is_refused_with_the_holders_pid(
    tmp_path: Path,
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from aioaccum._journal.journal import Journal
            j = Journal.open({str(tmp_path)!r}, segment_bytes=65536, max_bytes=1 << 20)
            print("ready", flush=True)
            sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
            with pytest.raises(JournalLockedError, match=f"pid {holder.pid}"):
                _open(tmp_path)
        finally:
            holder.kill()
            holder.wait(timeout=10)
    # Killed, it holds nothing: the kernel dropped its lock.
    _open(tmp_path).close()


def test_a_folder_that_cannot_be_made_is_a_clear_error_at_open(tmp_path: Path) -> None:
    # File permissions do not stop every user (root), but a file in the way stops anyone.
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"")
    with pytest.raises(JournalError, match=r"cannot make journal_dir .*not-a-folder"):
        _open(blocker / "journal")


def test_a_full_disk_is_a_typed_error_on_append(tmp_path: Path) -> None:
    # A file size limit makes the disk look full to posix_fallocate (EFBIG), in a child so the
    # limit and its signal stay there.
    script = textwrap.dedent(f"""
        import resource, signal
        from aioaccum._journal.journal import Journal
        from aioaccum.errors import JournalFullError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        j = Journal.open({str(tmp_path)!r}, segment_bytes=65536, max_bytes=1 << 30)
        j.append("t", 0, 1, None, b"x" * 1000)
        n = 1
        # From here no new file may grow past 32 KiB: the next segment cannot be reserved.
        resource.setrlimit(resource.RLIMIT_FSIZE, (32_768, 32_768))
        try:
            while True:
                j.append("t", 0, 1, None, b"x" * 1000)
                n += 1
        except JournalFullError as exc:
            print(n, "|", exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    count, message = out.split("|", 1)
    assert 50 <= int(count) <= 70  # the first segment's worth, then the refusal
    assert "no room for a journal segment" in message
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != 32_768


@pytest.mark.parametrize("headers", [(), (("trace", b"\x00\x01"), ("empty", None), ("é", b""))])
@pytest.mark.parametrize(("key", "value"), [(None, None), (b"", b""), (b"k" * 300, b"v" * 5000)])
def test_both_writers_write_the_same_bytes(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...],
) -> None:
    import mmap

    from aioaccum._journal.writer import EntryWriter, PyEntryWriter

    maps = [mmap.mmap(-1, 16384) for _ in range(2)]
    for cls, mm in zip((EntryWriter, PyEntryWriter), maps, strict=True):
        writer = cls(mm, 16, 16384)
        assert writer.append_record(7, 3, 11, -5, key, value, headers)
        assert writer.append(entries.DONE, b"done-payload")
        # An entry that does not fit leaves the map and the position as they were.
        pos = writer.pos
        assert not writer.append(entries.RECORD, b"x" * 20000)
        assert not writer.append_record(8, 3, 11, 0, None, b"x" * 20000, ())
        assert writer.pos == pos
        writer.release()
    assert maps[0][:] == maps[1][:]
    length, crc, kind = ENTRY_HEADER.unpack_from(maps[0], 16)
    payload = bytes(maps[0][16 + ENTRY_HEADER.size:16 + ENTRY_HEADER.size + length])
    assert kind == entries.RECORD
    assert crc == entries.entry_crc(kind, payload)
    assert entries.decode(kind, payload) == entries.Record(7, 3, 11, -5, key, value, headers)


def test_the_compiled_crc_agrees_with_a_bitwise_one_at_every_length() -> None:
    """The compiled CRC-32C runs long inputs as three interleaved streams joined by a shift;
    lengths around the block size (3 x 256 bytes) and their multiples, and a CRC continued
    from a previous one, must agree with a plain bitwise CRC (on the pure-Python path: the
    crc32c package that the reference writer uses)."""
    import random
    from collections.abc import Callable

    from aioaccum import _speedups

    crc32c: Callable[..., int]
    if _speedups.EXTENSIONS:
        from aioaccum._journal._cwriter import crc32c
    else:
        from crc32c import crc32c

    def bitwise(data: bytes, crc: int = 0) -> int:
        crc ^= 0xFFFFFFFF
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        return crc ^ 0xFFFFFFFF

    rng = random.Random(3)
    data = rng.randbytes(3000)
    for n in (*range(0, 40), *range(760, 776), 1000, 1536, 2303, 2304, 2305, 3000):
        assert crc32c(data[:n]) == bitwise(data[:n]), n
    start = bitwise(b"header")
    assert crc32c(data, start) == bitwise(data, start)
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
