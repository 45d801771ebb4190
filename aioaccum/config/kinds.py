"""The kinds of setting values: Kafka's ``ConfigDef.Type`` and ``Validator`` in one.

A :class:`Kind` reads a value from a ``.properties`` string (:meth:`Kind.parse`), checks and
normalises a Python value (:meth:`Kind.check`), and says how it is shown: the annotation of its
field, the docs' type and range columns, and the command line's metavar. Every row of every
settings table (the producer's, the HTTP service's, the aiokafka drop-in's arguments) has one.
Messages name the setting by ``label``, as the user spelt it (``linger.ms``, ``--workers``,
``--config serve.properties: workers``).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence

from aioaccum.errors import ConfigError

__all__ = [
    "LONG_MAX",
    "Acks",
    "Address",
    "Bool",
    "Choice",
    "File",
    "Folder",
    "Function",
    "Int",
    "Interceptors",
    "Kind",
    "Provider",
    "Servers",
    "SslContext",
    "Str",
    "TokenProvider",
]

LONG_MAX = 2**63 - 1
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


class Kind:
    """How a setting's values look: read from a property string, checked and normalised, and
    shown in the docs. Messages name the setting by ``label``, as the user spelt it."""

    annotation = "str"  # the annotation of the row's field; the dataclass checks they agree
    shown = "str"  # the docs' type column
    limits = ""  # the docs' range or choices column
    metavar = "VALUE"  # the command line's placeholder for the value

    def parse(self, text: str, label: str, name: str) -> object:
        return text

    def check(self, value: object, label: str) -> object:
        return value


class Int(Kind):
    shown, metavar = "int", "N"

    def __init__(
        self,
        lo: int,
        hi: int = LONG_MAX,
        *,
        optional: bool = False,
        os_default: bool = False,
        limits: str = "",
    ) -> None:
        self.lo, self.hi = lo, hi
        self.os_default = os_default  # Java's -1 for "the OS default", stored as None
        self.optional = optional or os_default
        self.annotation = "int | None" if self.optional else "int"
        self.limits = limits or (f">= {lo}" if hi == LONG_MAX else f"{lo} .. {hi}") + (
            "; -1 or None: the OS default" if os_default else ""
        )

    def parse(self, text: str, label: str, name: str) -> object:
        try:
            return int(text.strip())
        except ValueError:
            raise ConfigError(f"{label} must be an integer, got {text!r}") from None

    def check(self, value: object, label: str) -> object:
        if (value is None and self.optional) or (value == -1 and self.os_default):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{label} must be an int, got {value!r} ({type(value).__name__})")
        if value < self.lo:
            raise ConfigError(f"{label} must be >= {self.lo}, got {value}")
        if value > self.hi:
            raise ConfigError(f"{label} must be <= {self.hi}, got {value}")
        return value


class Bool(Kind):
    annotation = shown = "bool"
    metavar = "BOOL"

    def parse(self, text: str, label: str, name: str) -> object:
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise ConfigError(f"{label} must be true or false, got {text!r}")
        return word in _TRUE

    def check(self, value: object, label: str) -> object:
        if not isinstance(value, bool):
            raise ConfigError(f"{label} must be True or False, got {value!r}")
        return value


class Str(Kind):
    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional
        self.annotation = "str | None" if optional else "str"

    def check(self, value: object, label: str) -> object:
        if isinstance(value, str) or (value is None and self.optional):
            return value
        if self.optional:  # the optional strings are credentials: never echo one
            raise ConfigError(f"{label} must be a str or None, got a {type(value).__name__}")
        raise ConfigError(f"{label} must be a str, got {value!r}")


class Folder(Str):
    """A folder path: a str, or a path object (``pathlib.Path``), kept as a str; or None."""

    def __init__(self) -> None:
        super().__init__(optional=True)
        self.annotation = "str | os.PathLike[str] | None"

    def check(self, value: object, label: str) -> object:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if value is None or (isinstance(value, str) and value):
            return value
        raise ConfigError(f"{label} must be a folder path (str or pathlib.Path) or None, "
                          f"got {value!r}")


class Choice(Kind):
    def __init__(self, choices: Sequence[str], *, upper: bool, optional: bool = False) -> None:
        self.choices, self.upper, self.optional = choices, upper, optional
        self.annotation = "str | None" if optional else "str"
        self.limits = ", ".join(choices)

    def check(self, value: object, label: str) -> object:
        if value is None and self.optional:
            return None
        norm = value.strip() if isinstance(value, str) else None
        norm = norm and (norm.upper() if self.upper else norm.lower())
        if norm not in self.choices:
            raise ConfigError(f"{label} must be one of {self.limits}; got {value!r}")
        return norm


class Acks(Kind):
    annotation, shown, limits = "int", "int or str", "'all' (-1), 0, 1"

    def check(self, value: object, label: str) -> object:
        if isinstance(value, str) and value.strip().lower() == "all":
            return -1
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value in (-1, 0, 1):
            return value
        raise ConfigError(
            f"{label} must be one of 'all', -1, 0, 1 (or those as strings), got {value!r}"
        )


class Servers(Kind):
    annotation, shown, limits = "str | Sequence[str]", "list of str", "'host:port' each"

    def check(self, value: object, label: str) -> object:
        items: list[object]
        if isinstance(value, str):
            items = [s.strip() for s in value.split(",")]
        elif isinstance(value, Sequence):
            items = [s.strip() if isinstance(s, str) else s for s in value]
        else:
            items = [value]
        bad = [s for s in items if not isinstance(s, str) or not s or any(c.isspace() for c in s)]
        if not items or bad:
            raise ConfigError(
                f"{label} must be 'host:port' strings (or one comma-separated string), "
                f"got {value!r}"
            )
        return tuple(str(s) for s in items)


class Function(Kind):
    shown = "callable"

    def __init__(self, annotation: str) -> None:
        self.annotation = annotation

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(
            f"{label}={text!r}: Java class names can't be loaded; pass a Python callable "
            f"as {name} instead"
        )

    def check(self, value: object, label: str) -> object:
        if value is not None and not callable(value):
            raise ConfigError(f"{label} must be a callable or None, got {value!r}")
        return value


class TokenProvider(Function):
    def check(self, value: object, label: str) -> object:
        if value is None or callable(value) or callable(getattr(value, "token", None)):
            return value
        # Not echoed: an object holding credentials may show them in its repr.
        raise ConfigError(
            f"{label} must be an async callable returning OAuthToken(token, expires_at_ms) or "
            f"(token, expires_at_ms), or an aiokafka AbstractTokenProvider; got an object of "
            f"type {type(value).__name__}"
        )


class SslContext(Kind):
    annotation, shown = "ssl.SSLContext | None", "ssl.SSLContext"

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(f"{label} must be an ssl.SSLContext, not a string")

    def check(self, value: object, label: str) -> object:
        if value is not None and not isinstance(value, ssl.SSLContext):
            raise ConfigError(f"{label} must be an ssl.SSLContext, got {value!r}")
        return value


class Interceptors(Kind):
    """Objects with ``on_send`` and/or ``on_acknowledgement`` (Java's ProducerInterceptor)."""

    annotation, shown = "Sequence[ProducerInterceptor]", "list of objects"
    limits = "each with on_send and/or on_acknowledgement"

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(
            f"{label}={text!r}: Java class names can't be loaded; pass interceptor objects "
            f"as {name}=[...] instead (see aioaccum.interceptors.ProducerInterceptor)"
        )

    def check(self, value: object, label: str) -> object:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ConfigError(
                f"{label} must be a list of interceptor objects (see "
                f"aioaccum.interceptors.ProducerInterceptor), got {value!r}"
            )
        for i, item in enumerate(value):
            if isinstance(item, type):
                raise ConfigError(
                    f"{label}[{i}] is the class {item.__name__}; pass an instance, "
                    f"{item.__name__}()"
                )
            if not any(callable(getattr(item, m, None)) for m in _INTERCEPTOR_METHODS):
                raise ConfigError(
                    f"{label}[{i}] ({item!r}) has neither on_send nor on_acknowledgement; see "
                    "aioaccum.interceptors.ProducerInterceptor"
                )
        return tuple(value)


_INTERCEPTOR_METHODS = ("on_send", "on_acknowledgement")


class Provider(Kind):
    """An OpenTelemetry provider object (``TracerProvider``, ``MeterProvider``) or None."""

    def __init__(self, kind: str, method: str) -> None:
        self.annotation, self.shown, self.method = f"{kind} | None", kind, method
        self.limits = f"None: OpenTelemetry's global {kind}"

    def parse(self, text: str, label: str, name: str) -> object:
        raise ConfigError(f"{label} must be an OpenTelemetry {self.shown} object, not a string")

    def check(self, value: object, label: str) -> object:
        if value is not None and not callable(getattr(value, self.method, None)):
            raise ConfigError(
                f"{label} must be an OpenTelemetry {self.shown} (with {self.method}()) or "
                f"None, got {value!r}"
            )
        return value



class Address(Kind):
    """``HOST:PORT`` to listen on."""

    shown, limits, metavar = "str", "HOST:PORT", "HOST:PORT"

    def __init__(self, example: str) -> None:
        self.example = example

    def check(self, value: object, label: str) -> object:
        if isinstance(value, str):
            host, sep, port = value.rpartition(":")
            if sep and host and port.isdigit() and 0 < int(port) < 65536:
                return value
        raise ConfigError(f"{label} must be HOST:PORT (e.g. {self.example}), got {value!r}")


class File(Kind):
    """The path of an existing file, or None. Only the path is kept: the file is read by
    whoever uses it, so that a message about its content can name it."""

    annotation, shown, limits, metavar = "str | None", "path", "an existing file", "FILE"

    def check(self, value: object, label: str) -> object:
        if value is None:
            return None
        if not isinstance(value, str) or not os.path.isfile(value):
            raise ConfigError(f"{label} must be the path of a readable file, got {value!r}")
        return value
