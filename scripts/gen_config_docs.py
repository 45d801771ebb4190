"""Writes docs/configuration.md from the rows of ``aioaccum.config.SETTINGS``.

    .venv/bin/python scripts/gen_config_docs.py           rewrite the page
    .venv/bin/python scripts/gen_config_docs.py --check   exit 1 if the page is out of date

tests/unit/test_config_docs.py fails while the committed page differs from :func:`render`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aioaccum.config import SETTINGS, NoJavaName, Setting

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

INTRO = """\
# Configuration

<!-- Generated from SETTINGS in aioaccum/config/settings.py by scripts/gen_config_docs.py; edit those. -->

Every setting of `aioaccum.ProducerConfig`; `Producer(...)` takes them as keyword arguments.
Names are the Java client's with the dots turned into underscores, and defaults are Kafka 4.x's.
`ProducerConfig.from_properties` takes the Java names and the strings of a `.properties` file,
and also reads `compression.<codec>.level`, `sasl.jaas.config` (PLAIN and SCRAM login modules)
and the PEM truststore properties `ssl.truststore.location`, `ssl.truststore.certificates`,
`ssl.truststore.type` and `ssl.endpoint.identification.algorithm`.

Left at their defaults, `enable_idempotence` turns itself off when `acks` is not `all` or
`retries` is 0, and `delivery_timeout_ms` rises to `linger_ms + request_timeout_ms` when that is
larger. Set explicitly, the same conflicts are errors.

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
        _cell(repr(row.default), code=True),
        _cell(row.kind.limits),
        _cell(row.doc),
    )
    return f"| {' | '.join(cells)} |\n"


def render() -> str:
    """The page, one table line per setting, in the rows' order."""
    return INTRO + "".join(map(_line, SETTINGS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="only report whether the page is up to date"
    )
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if DOCS.exists() and DOCS.read_text(encoding="utf-8") == page:
            return 0
        print(f"{DOCS} is out of date: run scripts/gen_config_docs.py", file=sys.stderr)
        return 1
    DOCS.write_text(page, encoding="utf-8")
    print(f"wrote {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
