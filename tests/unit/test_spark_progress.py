"""The Spark sink without Spark: its progress bar, and that it keeps to pyspark's public API."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from aioaccum.spark.sink import _Progress

SPARK_SOURCES = [
    Path(__file__).resolve().parents[2] / "aioaccum" / "spark" / name
    for name in ("sink.py", "rows.py")
]


@pytest.mark.parametrize("path", SPARK_SOURCES, ids=lambda path: path.name)
def test_the_sink_uses_no_private_pyspark_api(path: Path) -> None:
    source = path.read_text()
    for private in (
        "_jdf",
        "_jvm",
        "_jsc",
        "local_connect_and_auth",
        "toPythonIterator",
        "collectToPython",
        "pyspark.serializers",
        "pyspark.util",
    ):
        assert private not in source, f"{path.name} uses {private}"


def draws(stderr: str) -> list[str]:
    return [part for part in stderr.replace("\n", "\r").split("\r") if part.strip()]


def test_the_bar_counts_partitions_and_ends_with_records_mb_and_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bar = _Progress(True, "aioaccum driver", "partitions", 4)
    bar.update(0, 1000, 2_000_000)
    bar.update(2, 500, 1_000_000)
    bar.finish(4)
    out, err = capsys.readouterr()

    assert out == ""
    assert draws(err)[0].startswith("aioaccum driver:   0%|")
    final = draws(err)[-1]
    assert final.startswith("aioaccum driver: 100%|")
    assert "| 4/4 [" in final
    assert re.search(r" partitions/s, 1,500 records, 3\.0 MB, [\d,]+ rec/s\]$", final), final


def test_a_stopped_write_ends_the_bar_where_it_got(capsys: pytest.CaptureFixture[str]) -> None:
    bar = _Progress(True, "aioaccum driver", "partitions", 4)
    bar.update(1, 10, 100)
    bar.finish(None)
    final = draws(capsys.readouterr().err)[-1]
    assert "| 1/4 [" in final
    assert ", 10 records, 0.0 MB, " in final


def test_counts_known_only_at_the_end_appear_only_at_the_end(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bar = _Progress(True, "aioaccum executors", "tasks")
    bar.set_total(3)
    bar.update(2, counts=False)
    bar.finish(3, records=7, nbytes=70)
    parts = draws(capsys.readouterr().err)
    assert all("records" not in part for part in parts[:-1])
    assert "| 3/3 [" in parts[-1]
    assert ", 7 records, 0.0 MB, " in parts[-1]


def test_disabled_it_draws_nothing_and_needs_no_tqdm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # an import of tqdm now fails
    bar = _Progress(False, "aioaccum driver", "partitions", 4)
    bar.set_total(5)
    bar.update(1, 10, 100)
    bar.finish(5, 10, 100)
    assert capsys.readouterr() == ("", "")
    with pytest.raises(ImportError, match=r"aioaccum\[spark\].*progress=False"):
        _Progress(True, "aioaccum driver", "partitions", 4)
