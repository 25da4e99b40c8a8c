"""A network namespace joined to this one by a veth pair: a worker started in it (`ip netns
exec NAME ...`) is reached over a network interface, as another host would be. Only where
this process may make one (root, iproute2); otherwise make_netns() says None."""
from __future__ import annotations

import os
import random
import shutil
import subprocess


def _ip(*args: str) -> bool:
    return subprocess.run(["ip", *args], capture_output=True, timeout=30).returncode == 0


def make_netns() -> tuple[str, str, str] | None:
    """(namespace, host-side address, namespace-side address) of a fresh network namespace
    joined to this one by a veth pair, or None where this process may not make one."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return None
    name = f"gpx{os.getpid() % 100000}"
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    rng = random.Random(os.getpid())
    net = next((n for n in (f"10.213.{rng.randrange(256)}.{4 * rng.randrange(64)}"
                            for _ in range(20)) if f" {n.rsplit('.', 1)[0]}." not in used), None)
    if net is None:
        return None
    base, last = net.rsplit(".", 1)
    host, inner = f"{base}.{int(last) + 1}", f"{base}.{int(last) + 2}"
    steps = [("netns", "add", name), ("link", "add", f"{name}a", "type", "veth", "peer", "name",
                                      f"{name}b"),
             ("link", "set", f"{name}b", "netns", name),
             ("addr", "add", f"{host}/30", "dev", f"{name}a"), ("link", "set", f"{name}a", "up"),
             ("netns", "exec", name, "ip", "addr", "add", f"{inner}/30", "dev", f"{name}b"),
             ("netns", "exec", name, "ip", "link", "set", f"{name}b", "up"),
             ("netns", "exec", name, "ip", "link", "set", "lo", "up")]
    for step in steps:
        if not _ip(*step):
            _ip("netns", "del", name)  # takes the veth pair with it
            _ip("link", "del", f"{name}a")
            return None
    return name, host, inner


def delete_netns(name: str) -> None:
    _ip("netns", "del", name)  # takes the veth pair with it
