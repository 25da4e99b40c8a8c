"""A small client for Prometheus's HTTP API (also Thanos, Mimir, VictoriaMetrics), stdlib only.

    api = PromApi("http://127.0.0.1:9090")
    api.query_range('sum by (hostname) (gpuprobe_gpu_sm_util_pct)', t0, t1, step_s=15)
    # -> [({"hostname": "node1"}, ts_s array, value array), ...]

Every failure a user can meet (nothing listening, a slow server, an HTTP error, an error status
in the body, a query the server refused) is a SourceError with one line that names the URL and
what went wrong. Warnings in a successful answer (a partial result from a federated store) are
kept in `api.warnings` for the caller to show.
"""
from __future__ import annotations

import contextlib
import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

from gpuprobe.errors import GpuprobeError

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses range queries with more points than this


class SourceError(GpuprobeError):
    """The metrics source could not answer (unreachable, slow, an error or a refused query)."""


class PromApi:
    def __init__(self, url: str, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.warnings: list[str] = []

    def _get(self, path: str, params: list[tuple[str, str]]) -> object:
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = _error_body(exc)
            if body is None:
                raise SourceError(f"prometheus {self.url}: HTTP {exc.code} on {path}") from None
        except (socket.timeout, TimeoutError):
            raise SourceError(f"prometheus {self.url}: no answer within {self.timeout_s:g} s "
                              f"on {path}") from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SourceError(f"prometheus {self.url}: unreachable ({reason})") from None
        except ValueError:
            raise SourceError(f"prometheus {self.url}: {path} did not answer JSON "
                              f"(is this a Prometheus API?)") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error", "no status") if isinstance(body, dict) else "not an object"
            raise SourceError(f"prometheus {self.url}: {path} failed: {err}")
        self.warnings += [str(w) for w in body.get("warnings", [])]
        return body.get("data")

    def query(self, expr: str, at_s: float | None = None) -> list[tuple[dict, float]]:
        """An instant vector: [(labels, value), ...]."""
        params = [("query", expr)] + ([("time", f"{at_s:.3f}")] if at_s is not None else [])
        data = self._get("/api/v1/query", params)
        with self._shape("/api/v1/query"):
            if data.get("resultType") == "scalar":
                return [({}, float(data["result"][1]))]
            return [(dict(r["metric"]), float(r["value"][1])) for r in data.get("result", [])]

    def query_range(self, expr: str, start_s: float, end_s: float,
                    step_s: float) -> list[tuple[dict, np.ndarray, np.ndarray]]:
        """A range query: [(labels, ts_s, values), ...], step_s raised so that no series has
        more points than Prometheus allows."""
        step_s = max(step_s, (end_s - start_s) / (MAX_POINTS_PER_SERIES - 1), 0.001)
        # The step goes in milliseconds: rounded up, n of them overshoot an end that is n
        # steps from the start (a range cut into 6 buckets of span/6), and Prometheus left the
        # last point out (the report lost the phase its range ended in). The end moves by that
        # rounding, never by a step.
        sent = round(step_s, 3)
        end_s += max(0.0, sent - step_s) * ((end_s - start_s) / step_s + 1) + 0.0005
        data = self._get("/api/v1/query_range", [("query", expr), ("start", f"{start_s:.3f}"),
                                                  ("end", f"{end_s:.3f}"), ("step", f"{sent:.3f}")])
        out = []
        with self._shape("/api/v1/query_range"):
            for r in data.get("result", []):
                pts = np.asarray(r.get("values", []), dtype=object).reshape(-1, 2)
                ts = pts[:, 0].astype(float)
                vals = np.array([_number(v) for v in pts[:, 1]], dtype=float)
                out.append((dict(r["metric"]), ts, vals))
        return out

    def series(self, match: str, start_s: float, end_s: float) -> list[dict]:
        """Label sets of the series matching `match` in [start_s, end_s]."""
        data = self._get("/api/v1/series", [("match[]", match), ("start", f"{start_s:.3f}"),
                                            ("end", f"{end_s:.3f}")]) or []
        with self._shape("/api/v1/series"):
            return [dict(r) for r in data]

    @contextlib.contextmanager
    def _shape(self, path: str):
        """An answer in JSON but not in Prometheus's shape (a wrong URL that serves some other
        JSON API) is a SourceError naming it, not an internal TypeError further on."""
        try:
            yield
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            raise SourceError(f"prometheus {self.url}: {path} answered JSON that is not a "
                              f"Prometheus result ({type(exc).__name__}: {exc}; is this a "
                              f"Prometheus API?)") from None


def duration(seconds: float) -> str:
    """A PromQL range duration: whole milliseconds (2.42 takes no decimals in '2.5s')."""
    return f"{max(1, round(seconds * 1000))}ms"


def _number(text) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _error_body(exc: urllib.error.HTTPError) -> dict | None:
    """Prometheus answers a bad query with 400/422 and a JSON error: keep it, to say why."""
    try:
        body = json.loads(exc.read())
    except (ValueError, OSError):
        return None
    return body if isinstance(body, dict) and "error" in body else None
