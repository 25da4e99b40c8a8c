"""The autopilot's loop: one decision per interval, each written to the audit log.

    ap = Autopilot(store, AdminClient(url, token), profile, slo, AutopilotConfig(url, ...))
    ap.run(stop_event)      # until stop_event is set (SIGTERM sets it, between decisions)

A decision: fill in the previous decision's outcome (what the interval since it measured),
read the target's layout, read the window of the server's requests from the store, forecast
the next interval, predict the candidates, ask the policy, switch when it says so (not in a
dry run), and insert the decision. Faults at the target are logged as a decision with action
`no-target`; nothing is changed and the next interval tries again. The live autopilot holds
the server's controller lease (lease.py): another controller's means it does not start, and
losing it stops it (LeaseLost, one line).
"""
from __future__ import annotations

import json
import math
import socket
import threading
import time
from dataclasses import dataclass, field, replace

from gpuprobe.autopilot import inputs, outcome
from gpuprobe.autopilot.lease import LeaseKeeper, holder_name
from gpuprobe.autopilot.policy import SWITCH, PolicyConfig, PolicyState, after_switch, decide, key, observe
from gpuprobe.deploy.admin_client import AdminClient, AdminError, layout_body
from gpuprobe.decide.recommendation import Deployment
from gpuprobe.errors import GpuprobeError, UserError


class LeaseLost(GpuprobeError):
    """The autopilot's lease on its server ended (taken over, expired): it stopped."""


@dataclass(frozen=True)
class AutopilotConfig:
    target: str
    interval_s: float = 30.0
    window_s: float | None = None  # how far back each decision reads (default: one interval)
    dry_run: bool = False
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    candidates: str = "all"  # inputs.MODES: recommend() itself, or the window mode
    devices: int = 2         # what recommend() may lay out (cross xPyD takes x + y workers)
    forecast: bool = True    # False: the last window stands for the next interval
    history_s: float = 600.0 # how far back the forecaster reads (buckets of one interval)

    @property
    def window(self) -> float:
        return self.window_s or self.interval_s


class Autopilot:
    def __init__(self, store, admin: AdminClient, profile, slo, cfg: AutopilotConfig,
                 say=print, clock=time.time, holder: str | None = None):
        self.store, self.admin, self.profile, self.slo, self.cfg = store, admin, profile, slo, cfg
        self.say, self.clock = say, clock
        self.host = socket.gethostname()
        self.holder = holder or holder_name()
        self.keeper: LeaseKeeper | None = None  # run()'s hold on the server (none in a dry run)
        self.state = PolicyState()
        self.virtual: tuple[str, dict] | None = None  # a dry run's layout after its first "switch"
        self.prev: tuple[int, float] | None = None    # (decision id, ts) awaiting its outcome
        self.decisions = 0
        self._rec_id: int | None = None

    # ---- the loop -------------------------------------------------------------------------
    def run(self, stop: threading.Event, max_decisions: int | None = None) -> int:
        """Decide every interval until `stop` is set; returns how many decisions were made.
        The live autopilot holds the server's lease throughout (a dry run changes nothing and
        takes none): UserError when another controller holds it at the start, LeaseLost
        (after the decision in flight) when it is lost."""
        if not self.cfg.dry_run:
            self.keeper = LeaseKeeper(self.admin, self.holder, f"autopilot of {self.cfg.target}",
                                      on_lost=lambda _: stop.set())
            self._take_lease(starting=True)
            self.keeper.start()
        try:
            t_next = self.clock()
            while not stop.is_set():
                self.step()
                if max_decisions and self.decisions >= max_decisions:
                    break
                t_next += self.cfg.interval_s
                if (late := self.clock() - t_next) > 0:  # a long switch: skip the missed ticks
                    t_next += math.ceil(late / self.cfg.interval_s) * self.cfg.interval_s
                while not stop.is_set() and (wait := t_next - self.clock()) > 0:
                    stop.wait(wait)
            self.close_outcome(partial=True)
        finally:
            if self.keeper is not None:
                self.keeper.close()
        if self.keeper is not None and self.keeper.lost:
            raise LeaseLost(f"the autopilot stopped, its lease is gone: {self.keeper.lost}")
        return self.decisions

    def _take_lease(self, starting: bool = False) -> AdminError | None:
        """Hold the lease if not yet held (a server unreachable at the start is asked again at
        each decision); the fault to log, or None. Another holder: at the start a UserError
        naming it; later, the lease counts as lost."""
        try:
            self.keeper.acquire()
        except AdminError as exc:
            if exc.kind == "held":
                if starting:
                    raise UserError(f"--target: {exc}; not started") from None
                self.keeper.note(exc)
            return exc
        return None

    def step(self) -> dict:
        """One decision, written to the audit log; returns the record."""
        now = self.clock()
        self.close_outcome()
        # The window: what arrived in it, finished or not (outcome.recent_window says why).
        rec = {"host": self.host, "target": self.cfg.target, "ts_s": now,
               "window_start_s": now - self.cfg.window, "window_end_s": now}
        try:
            if self.keeper is not None and not self.keeper.held and not self.keeper.lost:
                if (fault := self._take_lease()) is not None:
                    raise fault
            if self.keeper is not None and not self.keeper.renew():  # taken over: stop here
                return self._log({**rec, "current_layout": self.state.layout,
                                  "action": "no-target", "reason": f"lease lost: {self.keeper.lost}"})
            seen = self.admin.layout()
        except AdminError as exc:
            return self._log({**rec, "current_layout": self.state.layout, "action": "no-target",
                              "reason": f"{exc.kind}: {exc}; nothing changed, retried next interval"})
        self._observe(seen, now)
        rows = outcome.recent_window(self.store, now, self.cfg.window)
        # the audit log names the arrivals read, and a challenger's lead ages on their clock
        lead_now = float(rows["arrival_s"].max()) if len(rows) else now
        lead_start = lead_now - self.cfg.window
        rec.update(window_start_s=lead_start, window_end_s=lead_now)
        rec["current_layout"] = self.state.layout
        backlog = outcome.backlog_before(self.store, now - self.cfg.window, now)
        load = outcome.load_summary(rows, self.cfg.window, backlog)
        said = f" [{outcome.load_text(load)}]"  # the load is in every line the window made
        if not len(rows):
            d = decide(self.state, [], now, lead_start, self.cfg.policy, traffic=False)
            self.state = d.state
            reason = d.reason if not backlog else \
                f"holding: no arrivals in the window, {backlog} earlier ones still in flight{said}"
            return self._log({**rec, "action": "hold", "reason": reason,
                              "forecast": {"window_requests": 0, "load": load}})
        window_wl = inputs.window_workload(rows)
        if not len(window_wl):
            return self._log({**rec, "action": "hold", "forecast": {"load": load},
                              "reason": "holding: every request in the window was refused as one "
                                        "no layout serves" + said})
        hist = None
        if self.cfg.forecast:
            hist = inputs.window_workload(outcome.server_requests(
                self.store, now - max(self.cfg.history_s, self.cfg.window), now))
        wl, fsum = inputs.forecast_next(window_wl, self.cfg.window,
                                        self.cfg.interval_s, hist, self.cfg.interval_s)
        fsum["load"] = load
        try:
            pred = inputs.predict(wl, self.profile, self.slo, self.cfg.candidates, self.cfg.devices,
                                  self.store)
        except UserError as exc:  # a window the predictors cannot take: nothing to move to
            return self._log({**rec, "forecast": fsum, "action": "hold",
                              "reason": f"holding: {exc}{said}"})
        except Exception as exc:  # noqa: BLE001 - a predictor bug must not end the loop: logged
            return self._log({**rec, "forecast": fsum, "action": "hold",
                              "reason": f"holding: the prediction failed ({type(exc).__name__}: {exc}){said}"})
        cands = list(pred.get("candidates") or [])
        d = decide(self.state, cands, now, lead_start, self.cfg.policy, lead_now_s=lead_now)
        self.state = d.state
        rec.update(forecast=fsum, candidates=cands, action=d.action, reason=d.reason,
                   recommendation_id=pred.get("id"),
                   predicted={"source": pred.get("source"), "gain": _finite(d.gain),
                              "chosen": d.chosen, "current": d.current})
        if d.chosen:
            rec.update(chosen_layout=key(d.chosen["layout"], d.chosen.get("params")),
                       params=d.chosen.get("params") or {})
        if d.action == SWITCH:
            self._rec_id = pred.get("id")
            rec.update(self._switch(d.chosen, d.reason, now))
        if pred.get("overloaded"):
            rec["reason"] += "; overloaded: none meets the SLO at this load, ranked by attainment"
        rec["reason"] += said
        return self._log(rec)

    # ---- parts ----------------------------------------------------------------------------
    def _observe(self, seen: dict, now: float) -> None:
        if self.state.layout is None:  # the dwell of the layout found: since its last switch
            ok = [h for h in seen.get("history") or [] if h.get("status") == "ok"]
            self.state = replace(self.state, layout_since_s=float(ok[-1]["ts_s"]) if ok else now)
        layout, params = self.virtual or (seen["layout"], {
            "prefill_share": seen.get("prefill_share"),
            "chunked_prefill_tokens": seen.get("chunked_prefill_tokens")})
        self.state = observe(self.state, layout, params, now)

    def _switch(self, chosen: dict, reason: str, now: float) -> dict:
        new_key = key(chosen["layout"], chosen.get("params"))
        if self.cfg.dry_run:
            self.virtual = (chosen["layout"], dict(chosen.get("params") or {}))
            self.state = after_switch(self.state, True, now, self.cfg.policy, new_key)
            return {"action": "would-switch", "reason": f"dry run: {reason}"}
        try:
            # the body apply sends for the same settings (cross as xPyD: num_prefill, num_decode)
            body = layout_body(Deployment.from_params(chosen["layout"], chosen.get("params") or {}))
            holder = self.holder if self.keeper is not None else None
            entry = self.admin.switch(body, "autopilot", reason, holder=holder)
        except AdminError as exc:
            if self.keeper is not None and self.keeper.note(exc):  # not ours any more: stop
                return {"action": "no-target", "reason": f"{reason}; not done: {exc}"}
            if exc.kind != "failed":  # never started (or unknown): re-read next interval
                return {"action": "no-target",
                        "reason": f"{reason}; not done: {exc.kind}: {exc}; retried next interval"}
            self.state = after_switch(self.state, False, self.clock(), self.cfg.policy)
            out = {"action": "switch-failed", "reason": f"{reason}; failed: {exc}"}
            if self.state.halted:
                msg = (f"autopilot holds {self.state.layout} at {self.cfg.target}: the switch to "
                       f"{new_key} failed {self.state.failures} times ({exc})")
                self.store.insert_events([{"ts_s": now, "host": self.host, "source": "autopilot",
                                           "device": self.cfg.target, "kind": "autopilot_halted",
                                           "message": msg}])
                out["reason"] += "; halted (event raised)"
            return out
        # the dwell and the cooldown count from when the new layout is in place
        self.state = after_switch(self.state, True, self.clock(), self.cfg.policy, new_key)
        if self._rec_id is not None:
            self.store.mark_recommendation_applied(self._rec_id, self.cfg.target)
        return {"action": "switch", "reason": f"{reason}; done in {entry.get('duration_s', '?')} s"}

    def close_outcome(self, partial: bool = False) -> None:
        """Fill in the previous decision's outcome: what the interval after it measured."""
        if not self.prev:
            return
        dec_id, ts = self.prev
        self.prev = None
        end = self.clock()
        got = outcome.measure(outcome.server_requests(self.store, ts, end), self.slo.ttft_s,
                              self.slo.tbt_s)
        got.update(start_s=ts, end_s=end, layout_after=self.state.layout, partial=partial)
        self.store.set_decision_outcome(dec_id, got)

    def _log(self, rec: dict) -> dict:
        for col in ("params", "forecast", "candidates", "predicted"):
            if col in rec and not isinstance(rec[col], str):  # numpy numbers from the predictors
                rec[col] = json.loads(json.dumps(rec[col], default=_plain))
        rec["id"] = self.store.insert_decision(rec)
        self.prev = (rec["id"], rec["ts_s"])
        self.decisions += 1
        dry = " [dry run]" if self.cfg.dry_run else ""
        self.say(f"{time.strftime('%H:%M:%S', time.localtime(rec['ts_s']))} "
                 f"{rec.get('current_layout') or '?'}: {rec['action']}{dry}: {rec['reason']}")
        return rec


def _finite(x):
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else x


def _plain(x):
    try:
        return _finite(float(x))
    except (TypeError, ValueError):
        return str(x)
