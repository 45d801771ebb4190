"""The row type of every settings table, and what a table derives from its rows.

A :class:`Setting` is Kafka's ``ConfigDef.define(name, type, default, validator, doc)``: one row
holds everything known about one setting. A :class:`Table` holds the rows of one group (the
producer's in :mod:`aioaccum.config.settings`, the HTTP service's in
:mod:`aioaccum.config.serve_settings`, aiokafka's arguments in
:mod:`aioaccum.config.aiokafka_config`) and derives from them the lookups by name and by key,
the checks of names with "did you mean" suggestions, and the reading of values from
``.properties`` strings.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aioaccum.config.kinds import Kind
from aioaccum.errors import ConfigError

__all__ = ["SAME_AS_JAVA", "NoJavaName", "Setting", "Table"]


class _SameAsJava:
    def __repr__(self) -> str:
        return "SAME_AS_JAVA"


SAME_AS_JAVA: object = _SameAsJava()
"""In :attr:`Setting.java_default`: our default is the Java client's."""


@dataclass(frozen=True)
class NoJavaName:
    """In :attr:`Setting.key`: the setting has no single property name (Java's client has
    none, or an aiokafka argument sets no setting of its own)."""

    why: str
    read_from: tuple[str, ...] = ()
    """Properties :meth:`ProducerConfig.from_properties` takes the value from."""


@dataclass(frozen=True)
class Setting:
    """One setting, and the only place its facts are written.

    Attributes:
        name: The Python name: keyword argument and field (``linger_ms``), and command-line
            flag with dashes (``--linger-ms``).
        key: Its other name. For a producer setting, the Java client's property
            (``linger.ms``), which ``.properties`` files use; for a setting of the HTTP
            service, its key in ``--config``; for an aiokafka argument, the producer setting
            it sets.
        kind: Its type and validator (:mod:`aioaccum.config.kinds`).
        default: The value when it is not given.
        doc: One line for the docs and the command line's help.
        secret: Never shown by ``repr()`` nor in errors.
        java_default: The Java client's default, where ours differs (:data:`SAME_AS_JAVA`
            otherwise). ``from_properties`` uses it, so that a Java ``.properties`` file means
            what it means to the Java client, and the docs show both.
        why_not_java: Why our default differs, for the docs.
    """

    name: str
    key: str | NoJavaName
    kind: Kind
    default: object
    doc: str
    secret: bool = False
    java_default: object = None
    why_not_java: str = ""

    def __post_init__(self) -> None:
        if self.java_default is None:
            object.__setattr__(self, "java_default", SAME_AS_JAVA)
        elif not self.why_not_java:
            raise TypeError(f"setting {self.name}: a default other than Java's needs its why")

    @property
    def differs_from_java(self) -> bool:
        return self.java_default is not SAME_AS_JAVA

    @property
    def java(self) -> str | NoJavaName:
        """The Java client's property, for a producer setting (the same as :attr:`key`)."""
        return self.key

    @property
    def flag(self) -> str:
        """The command-line option that sets it."""
        return "--" + self.name.replace("_", "-")


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class Table:
    """The rows of one group of settings, and the lookups and checks derived from them.

    Args:
        rows: The settings, in the order the docs and the help list them.
        aliases: Names other clients use for a setting (``max_batch_size``), by the Python
            name they stand for.
        refused: Names that are known but deliberately not supported, with the reason;
            Python names are looked up with their underscores turned into dots.
        refused_prefixes: The same for whole families of names (``ssl.``).
        keys_go_to: Where the dotted keys are accepted, for the message when one is given as a
            keyword argument; empty when keys and names are accepted in the same places.
    """

    def __init__(
        self,
        rows: Iterable[Setting],
        *,
        aliases: Mapping[str, str] | None = None,
        refused: Mapping[str, str] | None = None,
        refused_prefixes: Iterable[tuple[str, str]] = (),
        keys_go_to: str = "",
    ) -> None:
        self.rows: tuple[Setting, ...] = tuple(rows)
        self.by_name: Mapping[str, Setting] = {row.name: row for row in self.rows}
        self.names: tuple[str, ...] = tuple(self.by_name)
        self.name_to_key: Mapping[str, str] = {
            row.name: row.key for row in self.rows if isinstance(row.key, str)
        }
        self.key_to_name: Mapping[str, str] = {k: n for n, k in self.name_to_key.items()} | {
            key: row.name
            for row in self.rows
            if isinstance(row.key, NoJavaName)
            for key in row.key.read_from
        }
        self.aliases: Mapping[str, str] = dict(aliases or {})
        self._refused = dict(refused or {})
        self._refused_prefixes = tuple(refused_prefixes)
        self._keys_go_to = keys_go_to
        if len(self.by_name) != len(self.rows) or set(self.aliases.values()) - set(self.names):
            raise TypeError("a settings table needs unique names, and aliases of its names")

    @property
    def refused(self) -> Mapping[str, str]:
        """The names known but deliberately not supported, each with the reason."""
        return dict(self._refused)

    @property
    def refused_prefixes(self) -> tuple[tuple[str, str], ...]:
        """The same for whole families of names: (prefix, reason)."""
        return self._refused_prefixes

    def name_of(self, label: str) -> str | None:
        """The setting that ``label`` names, by its Python name or its key."""
        return label if label in self.by_name else self.key_to_name.get(label)

    def check_name(self, name: str, *, dotted: bool = False) -> None:
        """Passes when ``name`` is a setting's Python name, or ``dotted`` and its key.

        Raises:
            ConfigError: Naming the closest setting, or why the name is not supported, or
                every setting when nothing is close.
        """
        if name in self.by_name or (dotted and name in self.key_to_name):
            return
        if not dotted and name in self.key_to_name and self._keys_go_to:
            raise ConfigError(
                f"unknown setting {name!r}; did you mean {self.key_to_name[name]!r}? "
                f"({self._keys_go_to})"
            )
        reason = self.refusal(name)
        if reason is not None:
            raise ConfigError(f"setting {name!r} is not supported: {reason}")
        match = self.suggest(name)
        if match is not None:
            raise ConfigError(f"unknown setting {name!r}; did you mean {match!r}?")
        raise ConfigError(f"unknown setting {name!r}; valid settings are {', '.join(self.names)}")

    def refusal(self, name: str) -> str | None:
        """Why ``name`` is deliberately not supported, if it is one of those."""
        dotted = name.replace("_", ".")
        reason = self._refused.get(dotted)
        if reason is None:
            reason = next((why for p, why in self._refused_prefixes if dotted.startswith(p)), None)
        return reason

    def suggest(self, name: str) -> str | None:
        """The setting ``name`` most likely meant, in the spelling ``name`` uses (a dotted
        name gets the key, another the Python name)."""
        # Case, camelCase, dashes, dots and Java's constant names (LINGER_MS_CONFIG) all fold
        # to the Pythonic spelling first, so only real misspellings are left to the fuzzy
        # match.
        norm = _CAMEL_HUMP.sub("_", name).lower().replace("-", "_").replace(".", "_")
        norm = norm.removesuffix("_config")
        match = self.aliases.get(norm) or (norm if norm in self.by_name else None)
        if match is None:
            # A truncated name ("max_in_flight") that starts exactly one setting.
            longer = [n for n in self.names if n.startswith(norm + "_")]
            match = longer[0] if len(longer) == 1 else None
        if match is None:
            match = next(iter(difflib.get_close_matches(norm, self.names, n=1, cutoff=0.6)), None)
        if match is not None and "." in name:
            return self.name_to_key.get(match, match)
        return match

    def parse(self, name: str, value: object, label: str) -> object:
        """A ``.properties`` string as the row's type; other values pass on to the checks."""
        if not isinstance(value, str):
            return value
        return self.by_name[name].kind.parse(value, label, name)

    def check(self, values: Mapping[str, object], labels: Mapping[str, str]) -> dict[str, object]:
        """Every row's value, from ``values`` or its default, checked by its kind.

        Raises:
            ConfigError: A value is invalid; the message names it by its label, or its name.
        """
        return {
            row.name: row.kind.check(
                values.get(row.name, row.default), labels.get(row.name, row.name)
            )
            for row in self.rows
        }
