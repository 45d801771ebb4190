"""The compiled hot path and the pure-Python reference produce the same bytes, metadata and
errors for the same calls (parity_scenario.py, run once under each, whichever this run uses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]


def run_scenario(pure: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "AIOACCUM_NO_EXTENSIONS"}
    if pure:
        env["AIOACCUM_NO_EXTENSIONS"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "unit.parity_scenario"],
        cwd=TESTS, env=env, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_compiled_and_pure_python_agree_on_bytes_metadata_and_errors() -> None:
    compiled = run_scenario(pure=False)
    pure = run_scenario(pure=True)
    assert compiled["hot_path"].startswith("compiled")
    assert pure["hot_path"].startswith("pure Python")
    # The same sources ran: as extension modules, then as Python files.
    assert all(not path.endswith(".py") for path in compiled["modules"].values())
    assert all(path.endswith(".py") for path in pure["modules"].values())
    for codec, run in compiled["runs"].items():
        reference = pure["runs"][codec]
        assert run["errors"] == reference["errors"], codec
        assert run["metadata"] == reference["metadata"], codec
        assert run["sent"] == reference["sent"], codec
        assert len(run["sent"]) > 10
        assert len(run["errors"]) == 5
