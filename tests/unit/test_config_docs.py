"""docs/configuration.md is what scripts/gen_config_docs.py makes of the settings' rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from aioaccum.config.producer_config import SETTINGS
from aioaccum.config.serve_settings import SETTINGS as SERVE_SETTINGS

REPO = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", REPO / "scripts" / "gen_config_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_page_is_what_the_generator_writes() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == generator().render(), (
        "docs/configuration.md is out of date: run .venv/bin/python scripts/gen_config_docs.py"
    )


def test_page_has_a_line_per_setting_in_order() -> None:
    page: str = generator().render()
    table = page.partition("|---|---|---|---|---|---|\n")[2].partition("\n\n")[0]
    names = [line.split("|")[1].strip(" `") for line in table.splitlines()]
    assert names == [row.name for row in SETTINGS]


def test_serve_page_has_the_generated_table_of_the_servers_settings() -> None:
    page = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    assert page == generator().render_serve(page), (
        "docs/serve.md's table of settings is out of date: run "
        ".venv/bin/python scripts/gen_config_docs.py"
    )
    table = page.partition(generator().SERVE_BEGIN)[2].partition("\n\n")[0].splitlines()[2:]
    assert [line.split("|")[2].strip(" `") for line in table] == [
        str(row.key) for row in SERVE_SETTINGS
    ]
