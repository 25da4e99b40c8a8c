"""The controller lease on a clock the test moves: who holds it, until when, what a renewal,
an expiry, a release and a forced takeover do, and the one-line refusals each names."""
import pytest

from gpuprobe.server.lease import Lease, LeaseError, parse_body


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_one_holder_until_it_expires():
    clock = Clock()
    lease = Lease(clock)
    grant, taken = lease.acquire("autopilot@a:1", "autopilot", 30.0)
    assert taken is None and (grant.holder, grant.expires_s) == ("autopilot@a:1", clock.t + 30)
    clock.t += 10
    with pytest.raises(LeaseError, match=r"held by autopilot@a:1 for 'autopilot' until "
                                         r"\d\d:\d\d:\d\d \(in 20 s\)") as exc:
        lease.acquire("apply@b:2", "", 30.0)
    assert exc.value.status == 409
    with pytest.raises(LeaseError, match="a layout change needs the lease"):
        lease.check_change("apply@b:2", False, "apply")
    assert lease.check_change("autopilot@a:1", False, "autopilot") is None  # its own change
    assert lease.renew("autopilot@a:1").expires_s == clock.t + 30  # from now, its own TTL
    clock.t += 29.9
    assert lease.view()["holder"] == "autopilot@a:1"
    clock.t += 0.2  # past the renewed expiry: free for anyone, and its holder cannot renew
    assert lease.view() == {"held": False}
    with pytest.raises(LeaseError, match="no lease is held"):
        lease.renew("autopilot@a:1")
    assert lease.check_change(None, False, "apply") is None
    assert lease.acquire("apply@b:2", "", 5.0)[1] is None


def test_force_takes_over_and_the_old_holder_is_told_by_whom():
    clock = Clock()
    lease = Lease(clock)
    lease.acquire("autopilot@a:1", "autopilot", 60.0)
    clock.t += 1
    taken = lease.check_change(None, True, "gpuprobe-apply")
    assert taken.holder == "autopilot@a:1" and lease.view()["held"] is False
    assert lease.view()["last_takeover"]["by"] == "gpuprobe-apply"
    with pytest.raises(LeaseError, match=r"autopilot@a:1 does not hold the lease: gpuprobe-apply "
                                         r"forced a layout change at \d\d:\d\d:\d\d \(force\)"):
        lease.renew("autopilot@a:1")
    lease.acquire("autopilot@a:1", "autopilot", 60.0)  # it may start again: a new lease
    grant, taken = lease.acquire("apply@b:2", "apply", 60.0, force=True)
    assert taken.holder == "autopilot@a:1" and grant.holder == "apply@b:2"
    with pytest.raises(LeaseError, match="apply@b:2 took the lease"):
        lease.release("autopilot@a:1")
    assert lease.release("apply@b:2").holder == "apply@b:2" and not lease.view()["held"]


def test_the_holder_acquiring_again_keeps_its_start():
    clock = Clock()
    lease = Lease(clock)
    first, _ = lease.acquire("x", "a", 10.0)
    clock.t += 5
    again, taken = lease.acquire("x", "b", 20.0)
    assert taken is None and again.acquired_s == first.acquired_s
    assert (again.purpose, again.expires_s) == ("b", clock.t + 20)


@pytest.mark.parametrize("body, field", [
    ([], None), ({}, "holder"), ({"holder": ""}, "holder"), ({"holder": "x\ny"}, "holder"),
    ({"holder": "x" * 129}, "holder"), ({"holder": "x", "ttl_s": 0}, "ttl_s"),
    ({"holder": "x", "ttl_s": "60"}, "ttl_s"), ({"holder": "x", "ttl_s": 3601}, "ttl_s"),
    ({"holder": "x", "ttl_s": True}, "ttl_s"), ({"holder": "x", "force": "yes"}, "force"),
    ({"holder": "x", "purpose": 3}, "purpose"), ({"holder": "x", "ttl": 5}, "ttl")])
def test_a_malformed_body_names_its_field(body, field):
    with pytest.raises(LeaseError) as exc:
        parse_body(body)
    assert exc.value.status == 400 and exc.value.param == field
    assert "\n" not in str(exc.value)
