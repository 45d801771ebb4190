"""Writes docs/configuration.md from the producer's rows (``aioaccum.config.SETTINGS``), and the
table of the server's settings in docs/serve.md from the HTTP service's rows.

    .venv/bin/python scripts/gen_config_docs.py           rewrite the pages
    .venv/bin/python scripts/gen_config_docs.py --check   exit 1 if a page is out of date

tests/unit/test_config_docs.py fails while a committed page differs from :func:`render` or
:func:`render_serve`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aioaccum.config import SETTINGS, NoJavaName, Setting
from aioaccum.config.serve_settings import SETTINGS as SERVE_SETTINGS
from aioaccum.config.settings import PRODUCER

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
SERVE_DOCS = DOCS.with_name("serve.md")
SERVE_BEGIN = (
    "<!-- Generated from SETTINGS in aioaccum/config/serve_settings.py by "
    "scripts/gen_config_docs.py; edit those. -->\n"
)
SERVE_END = "<!-- End of the generated table. -->\n"

INTRO = """\
# Configuration

<!-- Generated from the rows in aioaccum/config/ by scripts/gen_config_docs.py; edit those. -->

Every setting of `aioaccum.ProducerConfig`; `Producer(...)` takes them as keyword arguments.
Names are the Java client's with the dots turned into underscores, and defaults are Kafka 4.x's
except two, chosen for a user who sets nothing: `batch_size` is 1 MiB (Java: 16384) and
`buffer_memory_allocation_strategy` is `'incremental'` (Java: `'full'`). The one makes the
other safe: batches grow in small chunks, so a 1 MiB limit costs nothing per idle partition, and
a busy partition sends large batches without tuning, as librdkafka's 1,000,000-byte default
does. A `.properties` file that leaves either out gets Java's default instead, so a file taken
from a Java service configures the producer that service ran. Keyless records move to another
partition after `batch_size` bytes, as in Java; left at the 1 MiB default, after Java's 16384,
so that a slow stream still spreads over partitions (a busy partition's batch still grows past
that within one linger, as records come back to it).
`ProducerConfig.from_properties` takes the Java names and the strings of a `.properties` file,
and also reads `compression.<codec>.level`, `sasl.jaas.config` (PLAIN and SCRAM login modules)
and the PEM truststore properties `ssl.truststore.location`, `ssl.truststore.certificates`,
`ssl.truststore.type` and `ssl.endpoint.identification.algorithm`.

Left at their defaults, `enable_idempotence` turns itself off when `acks` is not `all` or
`retries` is 0, and `delivery_timeout_ms` rises to `linger_ms + request_timeout_ms` when that is
larger. Set explicitly, the same conflicts are errors.

Memory: records wait in batches whose bytes come from one pool of `buffer_memory` bytes, and
`send()` waits (up to `max_block_ms`) when it is spent. With
`buffer_memory_allocation_strategy='full'` each open batch holds `batch_size` bytes however few
records it has, so keys spread over many partitions can spend the pool on nearly empty batches.
With `'incremental'` (Kafka's KIP-1332) a batch holds chunks taken as its records arrive, up to
`batch_size`: a 2 KiB chunk first, then chunks that double (each as large as the batch so far, up
to 64 KiB). An open batch of a few records holds one small chunk, so memory follows the bytes
buffered rather than the number of partitions with data, and a large `batch_size` costs nothing
per idle partition; a busy batch of 1 MiB is 21 chunks, not 512. Compressed batches grow the
same way and are compressed back into their own chunks when they close; the chunks go to the
socket as they are. A chunk is taken without waiting; when the pool has none, the batch is sent
as it is and the next record waits in the pool's queue for a new batch, as with `'full'`.

| Python name | Java name | Type | Default | Range or choices | Description |
|---|---|---|---|---|---|
"""


def _cell(text: str, *, code: bool = False) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if code and text else text


def _line(row: Setting) -> str:
    if isinstance(row.java, NoJavaName):
        java = f"none: {row.java.why}"
    else:
        java = _cell(row.java, code=True)
    cells = (
        _cell(row.name, code=True),
        java,
        _cell(row.kind.shown),
        _cell(repr(row.default), code=True)
        + (f" (Java: {_cell(repr(row.java_default), code=True)})" if row.differs_from_java
           else ""),
        _cell(row.kind.limits),
        _cell(row.doc + (f". Not Java's default: {row.why_not_java}"
                         if row.differs_from_java else "")),
    )
    return f"| {' | '.join(cells)} |\n"


REFUSED_INTRO = """
## Java settings that are refused

`ProducerConfig.from_properties` (and a keyword argument spelt like one of them) raises a
`ConfigError` that names the setting and why, rather than dropping a setting that would change
what Java's client does. Together with the table above this covers every setting of Kafka
4.4's `ProducerConfig`.

| Java name | Why |
|---|---|
"""


def _refused_lines() -> str:
    names = [
        (_cell(name, code=True), why) for name, why in sorted(PRODUCER.refused.items())
    ]
    families = [
        (_cell(prefix + "*", code=True) + " (the rest)", why)
        for prefix, why in PRODUCER.refused_prefixes
    ]
    return "".join(f"| {name} | {_cell(why)} |\n" for name, why in names + families)


def render() -> str:
    """The page: one table line per setting, in the rows' order, then the Java settings that
    are refused, with the reason."""
    return INTRO + "".join(map(_line, SETTINGS)) + REFUSED_INTRO + _refused_lines()


def _serve_default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`" if isinstance(value, str) else str(value)


def _serve_line(row: Setting) -> str:
    cells = (
        _cell(f"{row.flag} {row.kind.metavar}", code=True),
        _cell(str(row.key), code=True),
        _serve_default(row.default),
        _cell(row.doc),
    )
    return f"| {' | '.join(cells)} |\n"


def render_serve(page: str) -> str:
    """``page`` (docs/serve.md) with its table of the server's settings made from the rows.

    Raises:
        ValueError: The page lacks the markers around the table.
    """
    head, begin, rest = page.partition(SERVE_BEGIN)
    _, end, tail = rest.partition(SERVE_END)
    if not begin or not end:
        raise ValueError(f"{SERVE_DOCS} lacks the markers around the settings' table")
    table = "| flag | `--config` key | default | what it does |\n|---|---|---|---|\n"
    rows = "".join(map(_serve_line, SERVE_SETTINGS))
    return head + begin + table + rows + "\n" + end + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="only report whether the page is up to date"
    )
    args = parser.parse_args(argv)
    serve_page = SERVE_DOCS.read_text(encoding="utf-8")
    pages = {DOCS: render(), SERVE_DOCS: render_serve(serve_page)}
    stale = [p for p, page in pages.items() if not p.exists() or p.read_text("utf-8") != page]
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run scripts/gen_config_docs.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(pages[path], encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
