"""The one ``.properties`` reader: files, command-line pairs, and values through the rows.

Java's ``.properties`` format is how Kafka's tools take settings, so it is how ``aioaccum``
takes them too: ``--producer.config`` and ``--producer-props`` for the producer (then
:meth:`~aioaccum.config.ProducerConfig.from_properties`), ``serve --config`` for the HTTP
service. :func:`read_properties_file` reads a file as ``java.util.Properties.load`` does;
:func:`read_values` reads each property's string through the row of its setting, by its key or
its Python name, so misspellings get the same suggestions everywhere; :func:`producer_values`
adds the Java producer properties that are not a row each (``sasl.jaas.config``, the PEM
truststore, ``compression.<codec>.level``).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aioaccum.config.settings import LEVEL_PROPERTIES, PRODUCER
from aioaccum.config.table import Table
from aioaccum.errors import ConfigError

__all__ = [
    "parse_pairs",
    "producer_properties",
    "producer_values",
    "read_properties_file",
    "read_values",
]


# --- the file: Java's .properties format, as java.util.Properties.load reads it

_WHITESPACE = " \t\f"
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|u|.)")
_ESCAPED = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties_file(path: str, option: str = "--producer.config") -> dict[str, str]:
    """The settings in a Java ``.properties`` file, read as Kafka's tools read it.

    The one reader of ``.properties`` files: ``--producer.config`` and ``serve --config``.
    Lines are ``name=value`` or ``name: value``; blank lines and lines starting with ``#`` or
    ``!`` are skipped; a line ending in ``\\`` continues on the next (as a multi-line
    ``sasl.jaas.config`` usually does); ``\\uXXXX``, ``\\t`` and the like are unescaped.
    Values are trimmed, as Kafka's ``ConfigDef`` trims them. A name given twice keeps its
    last value. Unlike Java, a line without ``=`` or ``:`` is an error, not a name with an
    empty value: in a file of producer settings it is a typo or a broken continuation.

    Args:
        path: The file, as given on the command line.
        option: The option that named the file, for the messages.

    Returns:
        Property names and their string values, in file order.

    Raises:
        ConfigError: The file cannot be read, is not UTF-8, or a line is malformed; the
            message names the file and the line but never quotes a value.
    """
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ConfigError(
            f"{option} {path}: cannot read it ({exc.strerror or exc}); give the path "
            f"of a readable Java .properties file (name=value lines)"
        ) from exc
    try:
        # Java reads Latin-1, but files are written in UTF-8 today; ASCII reads the same.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{option} {path}, line {line}: not UTF-8 text; save the file as UTF-8"
        ) from exc
    lines = _NEWLINE.split(text)
    props: dict[str, str] = {}
    index = 0
    while index < len(lines):
        where = f"{option} {path}, line {index + 1}"
        logical = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical):
            logical = logical[:-1]
            if index == len(lines):
                break
            logical += lines[index].lstrip(_WHITESPACE)
            index += 1
        key, value = _split_property(logical, where)
        props[key] = value
    return props


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes: the last one joins the next line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_property(line: str, where: str) -> tuple[str, str]:
    # java.util.Properties.load0: the name ends at the first unescaped '=', ':' or
    # whitespace; then whitespace and at most one '=' or ':' lead to the value.
    key_end = value_start = len(line)
    has_separator = escaped = False
    for position, char in enumerate(line):
        if not escaped and char in "=:" + _WHITESPACE:
            key_end, value_start, has_separator = position, position + 1, char in "=:"
            break
        escaped = char == "\\" and not escaped
    while value_start < len(line):
        char = line[value_start]
        if not has_separator and char in "=:":
            has_separator = True
        elif char not in _WHITESPACE:
            break
        value_start += 1
    # No text from the line in these messages: it may hold a secret.
    if not has_separator:
        raise ConfigError(
            f"{where}: no '=' or ':' after the setting's name; write name=value, or start the "
            f"line with # to comment it out"
        )
    if key_end == 0:
        raise ConfigError(f"{where}: the setting's name is empty; write name=value")
    key = _unescape(line[:key_end], where)
    return key, _unescape(line[value_start:], where).strip()


def _unescape(text: str, where: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match[1]
        if code == "u":
            raise ConfigError(
                f"{where}: \\u must be followed by four hex digits (Java's \\uXXXX escape); "
                f"write \\\\ for a backslash"
            )
        if len(code) == 5:
            return chr(int(code[1:], 16))
        return _ESCAPED.get(code, code)

    return _ESCAPE.sub(one, text)



# --- the command line: KEY=VALUE pairs, and which source wins


def parse_pairs(pairs: Sequence[str], option: str = "--producer-props") -> dict[str, str]:
    """``KEY=VALUE`` words from the command line as properties; later ones win.

    Raises:
        ConfigError: A word has no ``=`` or no key; the message never quotes it.
    """
    props: dict[str, str] = {}
    for number, pair in enumerate(pairs, 1):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            # Not quoted: a word without "=" may be a password that lost its key.
            lacks = "key" if sep else "'='"
            raise ConfigError(
                f"{option} expects KEY=VALUE pairs, but pair {number} of {len(pairs)} "
                f"has no {lacks}; write it as KEY=VALUE"
            )
        props[key.strip()] = value.strip()
    return props


def _settings_of(key: str) -> frozenset[str]:
    """The settings a property sets, so two spellings of one setting are seen as one."""
    label = key.strip()
    if label == "sasl.jaas.config":
        return frozenset({"sasl_plain_username", "sasl_plain_password"})
    return frozenset({PRODUCER.name_of(label) or label})


def _override(base: Mapping[str, str], top: Mapping[str, str]) -> dict[str, str]:
    # Drop what ``top`` sets under any spelling: "linger_ms" on the command line replaces
    # "linger.ms" from the file, instead of the two conflicting in from_properties.
    replaced = frozenset().union(*map(_settings_of, top))
    merged = {key: value for key, value in base.items() if not _settings_of(key) & replaced}
    merged.update(top)
    return merged


def producer_properties(
    config_file: str | None, pairs: Sequence[str], bootstrap_server: str | None
) -> dict[str, str]:
    """The producer's properties from the command line, for :meth:`Producer.from_properties`.

    As in Kafka's tools, ``--producer.config`` comes first, ``--producer-props`` override it
    and ``--bootstrap-server`` overrides both, whichever spelling (``linger.ms`` or
    ``linger_ms``) each uses.

    Args:
        config_file: The ``--producer.config`` file, if any.
        pairs: The ``--producer-props`` ``KEY=VALUE`` pairs.
        bootstrap_server: The ``--bootstrap-server`` value, if any.

    Raises:
        ConfigError: The file cannot be read or has a malformed line, or a pair has no ``=``.
    """
    props = read_properties_file(config_file) if config_file is not None else {}
    props = _override(props, parse_pairs(pairs))
    if bootstrap_server:
        props = _override(props, {"bootstrap.servers": bootstrap_server})
    return props


# --- values through the rows

_JAAS = re.compile(
    r"\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)(?P<options>[^;]*);?\s*",
    re.DOTALL,
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def _parse_jaas(value: object, label: str) -> tuple[str, str]:
    # The value holds the password, so no message here may quote it.
    match = _JAAS.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(
            f'{label} must look like \'<LoginModule> required username="..." password="...";\''
        )
    module = match["module"].rsplit(".", 1)[-1]
    if module == "OAuthBearerLoginModule":
        raise ConfigError(
            f"{label} uses OAuthBearerLoginModule: drop {label} and pass "
            "sasl_oauth_token_provider, an async callable returning the token, among the "
            "properties (with sasl.mechanism=OAUTHBEARER)"
        )
    if module not in ("PlainLoginModule", "ScramLoginModule"):
        raise ConfigError(
            f"{label} uses {module}; only PlainLoginModule and ScramLoginModule are supported"
        )
    options = {
        m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3]
        for m in _JAAS_OPTION.finditer(match["options"])
    }
    if "username" not in options or "password" not in options:
        raise ConfigError(f"{label} must set both username and password")
    return options["username"], options["password"]


_SSL_PROPERTIES = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.truststore.type",
        "ssl.endpoint.identification.algorithm",
    }
)


def _ssl_context_from(props: Mapping[str, object]) -> ssl.SSLContext:
    """Java's PEM truststore properties as a verifying ``ssl.SSLContext``."""
    kind = props.get("ssl.truststore.type", "PEM")
    if not isinstance(kind, str) or kind.strip().upper() != "PEM":
        raise ConfigError(
            f"ssl.truststore.type={kind!r}: only PEM truststores can be read; export the CA "
            "as PEM (keytool -exportcert -rfc) or pass ssl_context"
        )
    location = props.get("ssl.truststore.location")
    certificates = props.get("ssl.truststore.certificates")
    if location is not None and certificates is not None:
        raise ConfigError(
            "ssl.truststore.location and ssl.truststore.certificates both set the trusted CAs; "
            "keep one"
        )
    try:
        context = ssl.create_default_context(
            cafile=str(location).strip() if location is not None else None,
            cadata=str(certificates) if certificates is not None else None,
        )
    except (OSError, ssl.SSLError) as exc:
        which = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
        raise ConfigError(
            f"{which} could not be read as PEM CA certificates ({exc}); fix it, or pass "
            "ssl_context=ssl.create_default_context(cafile=...) instead"
        ) from None
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https")
    algorithm = algorithm.strip().lower() if isinstance(algorithm, str) else algorithm
    if algorithm not in ("https", ""):
        raise ConfigError(
            f"ssl.endpoint.identification.algorithm must be 'https' or '' (no host name "
            f"check), got {algorithm!r}"
        )
    context.check_hostname = algorithm == "https"
    return context


class _Values:
    """Values read from properties, by field, and the property each came from (the label
    that messages name it by)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.labels: dict[str, str] = {}

    def put(self, name: str, value: object, label: str) -> None:
        if name in self.values:
            raise ConfigError(f"{self.labels[name]!r} and {label!r} both set {name}; keep one")
        self.values[name] = value
        self.labels[name] = label

    def put_row(self, table: Table, key: str, value: object, label: str) -> None:
        """The property ``key`` (a row's key or Python name) through its row."""
        name = table.name_of(key)
        if name is None:
            table.check_name(key, dotted=True)
            raise AssertionError(key)  # pragma: no cover  (check_name raised)
        self.put(name, table.parse(name, value, label), label)


def _keys(properties: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    if not isinstance(properties, Mapping):
        raise ConfigError(f"properties must be a mapping, got {type(properties).__name__}")
    for key, value in properties.items():
        if not isinstance(key, str):
            raise ConfigError(f"property names must be strings, got {key!r}")
        yield key.strip(), value


def read_values(
    table: Table, properties: Mapping[str, Any], where: str = ""
) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings of ``table`` that ``properties`` give, each read through its row.

    A property is named by its row's key or Python name; a string is read as the row's kind
    (other values are left to the row's check).

    Args:
        table: The rows to read by.
        properties: Names and values, as :func:`read_properties_file` returns them.
        where: Where they came from (``--config FILE``), to begin each label and message.

    Returns:
        The values by Python name, and the label each is named by in messages.

    Raises:
        ConfigError: A name is not a setting (with the closest one), two names set one
            setting, or a string is not of the row's kind.
    """
    read = _Values()
    prefix = f"{where}: " if where else ""
    for key, value in _keys(properties):
        try:
            read.put_row(table, key, value, prefix + key)
        except ConfigError as exc:
            if not where or str(exc).startswith(prefix):
                raise
            raise ConfigError(prefix + str(exc)) from None
    return read.values, read.labels


def producer_values(properties: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Java producer properties as :class:`~aioaccum.config.ProducerConfig` fields, with the
    property each came from; as :func:`read_values`, and Java's properties that are not one
    row each: ``sasl.jaas.config``, the PEM truststore ones and ``compression.<codec>.level``.

    Raises:
        ConfigError: As :func:`read_values`, or one of those is malformed.
    """
    read = _Values()
    levels: dict[str, tuple[str, object]] = {}
    ssl_props: dict[str, object] = {}
    for label, value in _keys(properties):
        if label in LEVEL_PROPERTIES:
            levels[LEVEL_PROPERTIES[label]] = (label, value)
        elif label in _SSL_PROPERTIES:
            ssl_props[label] = value
        elif label == "sasl.jaas.config":
            user, password = _parse_jaas(value, label)
            read.put("sasl_plain_username", user, label)
            read.put("sasl_plain_password", password, label)
        else:
            read.put_row(PRODUCER, label, value, label)
    if ssl_props:
        read.put("ssl_context", _ssl_context_from(ssl_props), min(ssl_props))
    codec = read.values.get("compression_type", "none")
    codec = codec.strip().lower() if isinstance(codec, str) else codec
    if codec in levels and "compression_level" not in read.values:
        label, value = levels[codec]
        read.put("compression_level", PRODUCER.parse("compression_level", value, label), label)
    return read.values, read.labels
