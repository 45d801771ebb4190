"""Load generators for scripts/bench_serve.py: wrk with a Lua script, or an asyncio client.

Both keep every connection busy for a fixed time (a closed loop: a connection sends its next
request when the last one is answered), send the same REST Proxy v2 produce request each time,
and read every answer: a record counts as acknowledged only when its entry in ``offsets`` has a
numeric, non-negative offset and no error code. Anything else (a non-2xx status, an entry with
an error or no offset, a socket error or a time-out) is counted, never dropped.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REQUEST_TIMEOUT_S = 30.0
# After a socket error the asyncio client waits this long before the next request, so that a
# server that went away costs a few thousand errors, not a busy loop.
ERROR_PAUSE_S = 0.01
WRK_INSTALL = "install it with `apt-get install wrk` (Debian, Ubuntu) or `brew install wrk` (macOS)"

# wrk runs one Lua state per thread: the counters are globals of each thread's state, read back
# with thread:get() in done(), which wrk runs once all threads have stopped.
_WRK_LUA = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "%(content_type)s"
wrk.headers["Accept"] = "%(accept)s"
wrk.body = [==[%(body)s]==]
local per_request = %(per_request)d
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  acked = 0
  refused = 0
  non2xx = 0
  last_status = 0
  first_error = ""
end

local function remember(text)
  if first_error == "" then
    first_error = string.sub(string.gsub(text, "%%s+", " "), 1, 300)
  end
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    last_status = status
    remember(status .. " " .. body)
    return
  end
  -- The entries of "offsets" are the only objects with no object inside them.
  local n = 0
  for entry in string.gmatch(body, "{[^{}]*}") do
    if string.find(entry, '"offset"%%s*:%%s*%%d') and
        not string.find(entry, '"error_code"%%s*:%%s*%%-?%%d') then
      n = n + 1
    else
      remember(entry)
    end
  end
  acked = acked + n
  refused = refused + per_request - n
end

function done(summary, latency, requests)
  local acked_all, refused_all, non2xx_all, status = 0, 0, 0, 0
  for _, thread in ipairs(threads) do
    if thread:get("first_error") ~= "" then
      io.write("BENCH-ERROR " .. thread:get("first_error") .. "\\n")
    end
    acked_all = acked_all + thread:get("acked")
    refused_all = refused_all + thread:get("refused")
    non2xx_all = non2xx_all + thread:get("non2xx")
    if thread:get("last_status") ~= 0 then
      status = thread:get("last_status")
    end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH-RESULT {"requests": %%d, "duration_s": %%.6f, "acked": %%d, "refused": %%d, ' ..
    '"non2xx": %%d, "last_status": %%d, "socket_errors": %%d, "timeouts": %%d, ' ..
    '"p50_ms": %%.3f, "p99_ms": %%.3f}\\n',
    summary.requests, summary.duration / 1e6, acked_all, refused_all, non2xx_all, status,
    e.connect + e.read + e.write, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
"""


@dataclass(slots=True)
class LoadResult:
    """What one load generator saw in one timed phase."""

    requests: int = 0
    duration_s: float = 0.0
    acked: int = 0  # records with an offset and no error
    refused: int = 0  # records of 2xx answers without an offset, or with an error
    non2xx: int = 0  # requests answered with another status
    statuses: dict[int, int] = field(default_factory=dict)  # non-2xx status -> count
    socket_errors: int = 0
    timeouts: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    first_error: str | None = None  # the first failure's answer, shortened

    @property
    def errors(self) -> int:
        return self.refused + self.non2xx + self.socket_errors + self.timeouts

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Request:
    """The one request every connection sends, and how many records it carries."""

    url: str
    body: bytes
    content_type: str
    accept: str
    records: int


def wrk_version() -> str | None:
    """wrk's version line, or None when wrk is not installed."""
    path = shutil.which("wrk")
    if path is None:
        return None
    # wrk has no --version: it prints its version above the usage text and exits 1.
    out = subprocess.run([path, "-v"], capture_output=True, text=True, check=False, timeout=10)
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0].split(" Copyright")[0] if text else "wrk (version unknown)"


def run_wrk(
    request: Request, connections: int, duration_s: float, threads: int
) -> LoadResult:
    """One phase of wrk; its Lua script counts acknowledged records and non-2xx answers."""
    lua = _WRK_LUA % {
        "content_type": request.content_type,
        "accept": request.accept,
        "body": request.body.decode(),
        "per_request": request.records,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        seconds = max(1, round(duration_s))
        argv = [
            "wrk", "--threads", str(min(threads, connections)),
            "--connections", str(connections), "--duration", f"{seconds}s",
            "--timeout", f"{REQUEST_TIMEOUT_S:.0f}s", "--script", script.name, request.url,
        ]
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=seconds + 120
        )
    finally:
        Path(script.name).unlink()
    found = re.search(r"^BENCH-RESULT (\{.*\})$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or found is None:
        raise RuntimeError(
            f"wrk exited {done.returncode} with no result line:\n{done.stdout[-800:]}"
            f"{done.stderr[-800:]}"
        )
    raw = json.loads(found.group(1))
    status = int(raw.pop("last_status"))
    result = LoadResult(**raw)
    error = re.search(r"^BENCH-ERROR (.*)$", done.stdout, re.MULTILINE)
    result.first_error = None if error is None else error.group(1)
    if result.non2xx:
        # wrk's Lua state gives back numbers, not tables: the last status stands for them all.
        result.statuses = {status: result.non2xx}
    if result.requests == 0:
        result.p50_ms = result.p99_ms = None
    return result


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _count_records(answer: bytes, expected: int) -> tuple[int, str | None]:
    """How many records of a 2xx answer were acknowledged (offset >= 0 and no error code), and
    the first entry that was not, if any."""
    try:
        offsets = json.loads(answer).get("offsets")
    except (ValueError, AttributeError):
        return 0, answer[:300].decode(errors="replace")
    if not isinstance(offsets, list):
        return 0, answer[:300].decode(errors="replace")
    good = 0
    bad: str | None = None
    for entry in offsets[:expected]:
        offset = entry.get("offset") if isinstance(entry, dict) else None
        if isinstance(offset, int) and offset >= 0 and entry.get("error_code") is None:
            good += 1
        elif bad is None:
            bad = json.dumps(entry)[:300]
    return good, bad


async def _asyncio_phase(request: Request, connections: int, duration_s: float) -> LoadResult:
    import aiohttp

    result = LoadResult()
    latencies: list[float] = []
    headers = {"Content-Type": request.content_type, "Accept": request.accept}
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        deadline = time.perf_counter() + duration_s

        async def connection() -> None:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    async with session.post(request.url, data=request.body, headers=headers) as r:
                        answer = await r.read()
                        status = r.status
                except TimeoutError:
                    result.timeouts += 1
                    continue
                except aiohttp.ClientError:
                    result.socket_errors += 1
                    await asyncio.sleep(ERROR_PAUSE_S)
                    continue
                latencies.append(time.perf_counter() - started)
                result.requests += 1
                bad: str | None
                if 200 <= status <= 299:
                    good, bad = _count_records(answer, request.records)
                    result.acked += good
                    result.refused += request.records - good
                else:
                    result.non2xx += 1
                    result.statuses[status] = result.statuses.get(status, 0) + 1
                    bad = f"{status} {answer[:300].decode(errors='replace')}"
                if result.first_error is None and bad is not None:
                    result.first_error = " ".join(bad.split())

        started = time.perf_counter()
        await asyncio.gather(*(connection() for _ in range(connections)))
        result.duration_s = time.perf_counter() - started
    latencies.sort()
    p50, p99 = _percentile(latencies, 0.50), _percentile(latencies, 0.99)
    result.p50_ms = None if p50 is None else p50 * 1000
    result.p99_ms = None if p99 is None else p99 * 1000
    return result


def run_asyncio(request: Request, connections: int, duration_s: float) -> LoadResult:
    """One phase of the asyncio client (aiohttp, uvloop when installed), in this process."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_asyncio_phase(request, connections, duration_s))
    result: LoadResult = uvloop.run(_asyncio_phase(request, connections, duration_s))
    return result
