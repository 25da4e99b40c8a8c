"""The autopilot's hold on its server: the controller lease, taken at start and renewed from a
thread every third of its TTL, so a switch that runs for minutes keeps it too.

    keeper = LeaseKeeper(admin, holder="autopilot@host:42", purpose="autopilot")
    keeper.acquire()          # AdminError 'held' (naming the holder) when another controller has it
    keeper.start()            # renewing; keeper.lost says why once it is gone
    keeper.close()            # stop renewing, release

The lease, not a file in one store, is what makes one controller per server: two autopilots
that reach it as localhost and 127.0.0.1, or keep two stores, still meet there. Losing it (a
person's `apply --force`, an expiry while the server was unreachable) is final: the
autopilot stops rather than act on a server someone else now steers.
"""
from __future__ import annotations

import os
import socket
import threading

from gpuprobe.deploy.admin_client import AdminError

TTL_S = 60.0  # renewed every 20 s: an autopilot that dies frees its server within a minute


def holder_name() -> str:
    """This process's holder name: host and pid, so two autopilots never share one."""
    return f"autopilot@{socket.gethostname()}:{os.getpid()}"


class LeaseKeeper:
    def __init__(self, admin, holder: str, purpose: str, ttl_s: float = TTL_S,
                 on_lost=None):
        self.admin, self.holder, self.purpose, self.ttl_s = admin, holder, purpose, ttl_s
        self.on_lost = on_lost  # called once, from the renewing thread, with the reason
        self.held = False
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lease (or take it again, if this holder has it). AdminError: 'held' when
        another controller holds it; other kinds when the server cannot be asked now."""
        self.admin.acquire_lease(self.holder, self.purpose, self.ttl_s)
        self.held = True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, name="lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3) and not self.lost:
            self.renew()

    def renew(self) -> bool:
        """Renew now (the thread does every ttl_s / 3; the autopilot also before each
        decision, so a takeover is seen within one interval). False once the lease is gone."""
        if not self.held:
            return not self.lost
        try:
            self.admin.renew_lease(self.holder)
        except AdminError as exc:
            # 'held': expired or taken over, never carried on regardless; anything else
            # (unreachable): tried again, and an expiry meanwhile is told as 'held'
            self.note(exc)
        return not self.lost

    def _lose(self, reason: str) -> None:
        if self.lost:
            return
        self.held, self.lost = False, reason
        if self.on_lost is not None:
            self.on_lost(reason)

    def note(self, exc: AdminError) -> bool:
        """A call made under the lease came back 'held': the lease is gone. True if so."""
        if exc.kind != "held":
            return False
        self._lose(str(exc))
        return True

    def close(self) -> None:
        """Stop renewing; release the lease if it is still this holder's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.held:
            try:
                self.admin.release_lease(self.holder)
            except AdminError:
                pass  # unreachable now: the lease runs out on its own within ttl_s
            self.held = False
