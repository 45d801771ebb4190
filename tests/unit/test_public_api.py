"""Every name the documentation tells users to import is importable from where it says.

The names are read from the README and docs/ themselves (``from aioaccum... import ...`` lines in
their code and dotted ``aioaccum.x.Name`` references in their text), so a module that moves
without a re-export fails here, and so does a page that names a path that never existed.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import aioaccum

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# The public paths that users already have in their code, named whether or not a page shows them.
KNOWN = [
    "aioaccum.Producer",
    "aioaccum.ProducerConfig",
    "aioaccum.wait_all",
    "aioaccum.config.ProducerConfig",
    "aioaccum.errors.AioAccumError",
    "aioaccum.sync.SyncProducer",
    "aioaccum.spark.write_dataframe",
    "aioaccum.compat.AIOKafkaProducer",
    "aioaccum.compat.config_from_aiokafka",
    "aioaccum.prometheus.ProducerCollector",
    "aioaccum.otel.observe_metrics",
    "aioaccum.interceptors.ProducerInterceptor",
    "aioaccum.interceptors.ProducerRecord",
    "aioaccum.transactions.PreparedTransaction",
    "aioaccum.transactions.commit_prepared",
    "aioaccum.metrics.MetricValue",
    "aioaccum.oauth.OAuthToken",
    "aioaccum.integrations.asgi.producer_lifespan",
    "aioaccum.integrations.aiohttp.producer_context",
]

_IMPORT = re.compile(r"^\s*from (aioaccum(?:\.\w+)*) import (\([^)]*\)|[^\n#]+)", re.MULTILINE)
_DOTTED = re.compile(r"\baioaccum(?:\.[A-Za-z_]\w*)+")


def documented_imports() -> set[str]:
    """``module.name`` for every name a page imports with ``from aioaccum... import``."""
    found = set()
    for page in PAGES:
        for module, names in _IMPORT.findall(page.read_text()):
            for name in names.strip("()").replace("\n", " ").split(","):
                name = name.split(" as ")[0].strip()
                if name and name.isidentifier():
                    found.add(f"{module}.{name}")
    return found


def documented_dotted() -> set[str]:
    found = set()
    for page in PAGES:
        for dotted in _DOTTED.findall(page.read_text()):
            found.add(dotted.rstrip("."))
    return found


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(dotted)


def test_the_pages_are_read() -> None:
    # The readers above must find what they look for, or the tests below prove nothing.
    assert "aioaccum.compat.AIOKafkaProducer" in documented_imports()
    assert "aioaccum.sync.SyncProducer" in documented_dotted()


@pytest.mark.parametrize(
    "dotted", sorted(documented_imports() | documented_dotted() | set(KNOWN))
)
def test_a_documented_name_is_importable(dotted: str) -> None:
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{dotted}, named in the docs or a user's code, cannot be reached: {exc}")


@pytest.mark.parametrize(
    "module",
    [
        "aioaccum",
        "aioaccum.config",
        "aioaccum.compat",
        "aioaccum.spark",
        "aioaccum.interceptors",
        "aioaccum.transactions",
        "aioaccum.metrics",
    ],
)
def test_every_name_in_all_is_there(module: str) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in loaded.__all__ if not hasattr(loaded, name)]
    assert not missing, f"{module}.__all__ names what it does not have: {missing}"


def test_the_package_root_only_re_exports() -> None:
    """``aioaccum/__init__.py`` defines nothing but ``__version__`` and ``__all__``."""
    tree = ast.parse(Path(aioaccum.__file__).read_text())
    defined = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    assert not defined
