"""A contender's child process (``scripts/bench --child SPEC``): runs the asyncio runner of
``clients`` or the synchronous one of ``sync_clients`` that the spec names, and writes its
result. Its own module, above both, so that neither runner module imports the other."""

from __future__ import annotations

import json
import traceback

from benchlib.clients import ASYNC_RUNNERS, Recorder, write_result
from benchlib.spec import Spec
from benchlib.sync_clients import SYNC_RUNNERS

__all__ = ["child_main"]


def child_main(spec_json: str) -> int:
    """Runs one contender as its spec says and writes its result as JSON to the result path.

    When the client raises (a setting it refuses, a broker it cannot reach), the result names
    the exception, so the parent reports that run as failed for that reason and goes on.
    """
    spec = Spec.from_json(spec_json)
    rec = Recorder(spec)
    try:
        if spec.contender in ASYNC_RUNNERS:
            import uvloop

            uvloop.run(ASYNC_RUNNERS[spec.contender](spec, rec))
        else:
            SYNC_RUNNERS[spec.contender](spec, rec)
    except Exception as exc:
        traceback.print_exc()
        with open(spec.result_path, "w") as out:
            json.dump({"raised_error": f"{type(exc).__name__}: {exc}"}, out)
        return 1
    write_result(rec)
    return 0
