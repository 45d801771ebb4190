"""An HTTP front door to a Kafka topic for threaded code: Flask on waitress, one SyncProducer.

The blocking twin of ``events_service.py``. Run it (``pip install aioaccum[web]``)::

    AIOACCUM_BOOTSTRAP=127.0.0.1:19092 EVENTS_TOPIC=events \\
        python examples/sync_service.py --host 127.0.0.1 --port 8000 --threads 8

    curl -X POST --data-binary 'hello' 'http://127.0.0.1:8000/events?key=user-1'
    curl -X POST --data-binary 'hello' 'http://127.0.0.1:8000/events?wait=true'

One :class:`~aioaccum.sync.SyncProducer` is created before the server listens and is shared by
all of waitress's request threads: ``send()`` is thread-safe and returns a future at once while
the buffer has room. ``POST /events`` answers ``202`` once the record is buffered, or, with
``?wait=true``, ``200`` with ``{"topic", "partition", "offset"}`` once the broker acknowledged it.
``?key=`` sets the record key. An empty body or a ``wait`` that is not a yes/no word is ``400``;
when the buffer stays full for ``max.block.ms`` the answer is ``503`` with ``Retry-After``; a
metadata or delivery timeout is ``504``, and so is an acknowledgement slower than
``EVENTS_ACK_TIMEOUT_S`` (the record may still arrive); a body larger than ``max.request.size``
is ``413``. Errors are JSON: ``{"error": <type>, "message": <text>}``. ``GET /health`` answers
``{"status": "ok"}``; ``GET /metrics`` shows the producer's metrics.

On SIGTERM or SIGINT waitress stops taking requests and lets its threads finish the ones they
are serving (for up to 5 s; requests still queued are dropped), the listening socket closes, and
the producer is flushed and closed within ``EVENTS_CLOSE_TIMEOUT_S``. Further SIGTERMs are
ignored meanwhile; a second SIGINT cuts the flush short. The process exits with 0 when the
flush finished in time, else 1.

Environment:
    AIOACCUM_BOOTSTRAP      bootstrap servers (default 127.0.0.1:9092)
    EVENTS_TOPIC            topic to write to (default "events")
    EVENTS_PRODUCER_PROPS   Java-style producer properties, comma separated, e.g.
                            "linger.ms=10,compression.type=lz4,buffer.memory=8388608"
    EVENTS_ACK_TIMEOUT_S    seconds a ``?wait=true`` request waits for the broker (default 30)
    EVENTS_CLOSE_TIMEOUT_S  seconds to flush on shutdown (default 25)
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from flask import Flask, Response, jsonify, request
from waitress.server import create_server
from werkzeug.exceptions import BadRequest, HTTPException

from aioaccum import AioAccumError, RecordTooLargeError
from aioaccum.sync import SyncProducer

# isort: split
# Run as ``python examples/sync_service.py``, so this file's folder is on sys.path.
from _common import TRUE_WORDS, ServiceSettings, error_answer

log = logging.getLogger("sync_service")

FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})
DEFAULT_THREADS = 8


@dataclass(frozen=True, slots=True)
class Settings(ServiceSettings):
    """What the service reads from its environment."""

    ack_timeout: float

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> Settings:
        """The settings in ``env`` (see the module docstring).

        Raises:
            ValueError: A variable cannot be parsed (``ConfigError`` for producer settings).
        """
        common = ServiceSettings.from_environ(env)
        return cls(
            topic=common.topic,
            config=common.config,
            close_timeout=common.close_timeout,
            ack_timeout=float(env.get("EVENTS_ACK_TIMEOUT_S", "30")),
        )


def json_response(
    body: Mapping[str, Any], status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    response = jsonify(body)
    response.status_code = status
    response.headers.update(headers or {})
    return response


def error_response(exc: AioAccumError) -> Response:
    """The HTTP answer for an error of the producer's."""
    answer = error_answer(exc)
    return json_response(answer.body, answer.status, answer.headers)


def parse_flag(name: str, text: str) -> bool:
    """A yes/no query parameter.

    Raises:
        BadRequest: ``text`` is neither a yes nor a no word.
    """
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise BadRequest(
        f"?{name}={text!r} is not a yes/no value: use one of "
        f"{', '.join(sorted(TRUE_WORDS | (FALSE_WORDS - {''})))}"
    )


class Outcome(Protocol):
    """What a record's future offers once it is done."""

    def exception(self, timeout: float | None = None) -> BaseException | None: ...


def _log_failure(future: Outcome) -> None:
    # May run on the producer's loop thread, so it must not call the producer. The client
    # already has its 202; the log is the only place this failure can go.
    if (exc := future.exception()) is not None:
        log.warning("an accepted event was not delivered: %s: %s", type(exc).__name__, exc)


def create_app(producer: SyncProducer, settings: Settings) -> Flask:
    """The WSGI app, sending with ``producer``; its owner flushes and closes the producer."""
    topic = settings.topic
    max_request_size = settings.config.max_request_size
    app = Flask(__name__)
    # Also bounds bodies sent without a Content-Length (chunked); werkzeug answers 413.
    app.config["MAX_CONTENT_LENGTH"] = max_request_size

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        # Flask's own answers (400, 404, 405, 413) in the same JSON shape as the producer's.
        return json_response(
            {"error": type(exc).__name__, "message": exc.description or exc.name},
            exc.code or 500,
        )

    @app.post("/events")
    def post_event() -> Response:
        wait = parse_flag("wait", request.args.get("wait", ""))
        length = request.content_length
        if length is not None and length > max_request_size:
            # Refuse before reading a body that could never be sent.
            return error_response(
                RecordTooLargeError(
                    f"the body is {length} bytes, larger than max_request_size={max_request_size}"
                )
            )
        body = request.get_data(cache=False)
        if not body:
            raise BadRequest("the request body is empty: POST the event's bytes as the body")
        key = request.args.get("key")
        try:
            # Blocks this request's thread only while the buffer is full (up to max.block.ms).
            future = producer.send(topic, body, key=None if key is None else key.encode())
            if not wait:
                future.add_done_callback(_log_failure)
                return json_response({"status": "accepted", "topic": topic}, 202)
            metadata = future.result(settings.ack_timeout)
        except AioAccumError as exc:
            return error_response(exc)
        except TimeoutError:
            # The wait ended, not the record: retrying could write it twice, so no Retry-After.
            return json_response(
                {
                    "error": "AckTimeout",
                    "message": f"no acknowledgement within {settings.ack_timeout} s "
                    "(EVENTS_ACK_TIMEOUT_S); the record may still be delivered",
                },
                504,
            )
        return json_response(
            {"topic": metadata.topic, "partition": metadata.partition, "offset": metadata.offset}
        )

    @app.get("/health")
    def health() -> Response:
        return json_response({"status": "ok"})

    @app.get("/metrics")
    def metrics() -> Response:
        return json_response(producer.metrics())

    return app


def close_producer(producer: SyncProducer, timeout: float) -> bool:
    """Flush, then close, within ``timeout`` seconds in all.

    Returns:
        Whether every record had its answer from the broker before the time ran out (failed
        deliveries were logged as they happened).
    """
    deadline = time.monotonic() + timeout
    log.info("flushing the producer (up to %.1f s)", timeout)
    flushed = True
    try:
        producer.flush(timeout)
    except AioAccumError as exc:
        flushed = False
        log.warning("the flush did not finish: %s: %s", type(exc).__name__, exc)
    finally:
        # Records still unsent now fail with ProducerClosedError.
        producer.close(max(deadline - time.monotonic(), 0.0))
    metrics = producer.metrics()
    log.info(
        "producer closed: %d record(s) sent, %d failed in all",
        metrics["record-send-total"],
        metrics["record-error-total"],
    )
    return flushed


def _stop_serving(signum: int, frame: FrameType | None) -> None:
    # waitress's run() catches SystemExit: it then lets its threads finish and returns.
    log.info("%s: stopping the server", signal.Signals(signum).name)
    raise SystemExit(0)


def serve(app: Flask, host: str, port: int, threads: int) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then stop listening."""
    server = create_server(app, host=host, port=port, threads=threads)
    log.info("serving on http://%s:%d with %d threads", host, port, threads)
    try:
        server.run()
    finally:
        server.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="POST a body, it becomes a Kafka record.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        help="request threads, all sharing one producer (default %(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings.from_environ(os.environ)
    producer = SyncProducer(config=settings.config)
    try:
        # SIGTERM's default would end the process at once, with the buffer unsent.
        signal.signal(signal.SIGTERM, _stop_serving)
        signal.signal(signal.SIGINT, _stop_serving)
        serve(create_app(producer, settings), args.host, args.port, args.threads)
    finally:
        # The close is bounded by close_timeout: another SIGTERM must not cut it short, while
        # a second Ctrl-C (KeyboardInterrupt) may, for someone who would rather not wait.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        delivered = close_producer(producer, settings.close_timeout)
    return 0 if delivered else 1


if __name__ == "__main__":
    sys.exit(main())
