"""argparse `type=` checkers shared by the commands: a bad value is argparse's one-line error
and exit 2 ("argument --port: must be 0-65535, got 99999"), never an exception further in."""
from __future__ import annotations

import argparse
import math
import os
import re
from urllib.parse import urlsplit


def _number(text: str, kind, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _checked(kind, what: str, ok, rule: str):
    """A checker: `text` read as `kind`, and refused with `rule` unless ok(value)."""
    def check(text: str):
        value = _number(text, kind, what)
        if not ok(value):
            shown = f"{value:g}" if kind is float else str(value)
            raise argparse.ArgumentTypeError(f"{rule}, got {shown}")
        return value
    return check


positive_int = _checked(int, "an integer", lambda v: v >= 1, "must be at least 1")
nonneg_int = _checked(int, "an integer", lambda v: v >= 0, "must not be negative")
positive_float = _checked(float, "a number", lambda v: v > 0, "must be above 0")
nonneg_float = _checked(float, "a number", lambda v: v >= 0, "must not be negative")
fraction = _checked(float, "a number", lambda v: 0 < v < 1,  # a share of a device
                    "must be between 0 and 1 (exclusive)")
share_of_whole = _checked(float, "a number", lambda v: 0 < v <= 1,  # up to all of it
                          "must be above 0 and at most 1")
port = _checked(int, "a port number", lambda v: 0 <= v <= 65535, "must be 0-65535")


def int_at_least(least: int, why: str):
    """A checker for an integer of at least `least`, the refusal saying why."""
    return _checked(int, "an integer", lambda v: v >= least, f"must be at least {least} ({why})")


def regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid regular expression: {exc}") \
            from None
    return text


def out_file(text: str) -> str:
    """A file path to write: not a folder, and its folder must exist."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file path")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"folder {folder!r} does not exist")
    return text


def http_url(text: str) -> str:
    """An http(s) URL with a host (a server, an upstream, a scrape target)."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL")
    return text


def host_port(text: str) -> str:
    """HOST:PORT (an IPv4 address or a name), the port 0-65535."""
    host, sep, num = text.rpartition(":")
    if not sep or not host or not num.isdigit() or int(num) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return text


def host_port_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of HOST:PORT, each once, with a port above 0."""
    items = tuple(s.strip() for s in text.split(","))
    for item in items:
        if host_port(item).rpartition(":")[2] == "0":
            raise argparse.ArgumentTypeError(f"{item!r}: a worker's port cannot be 0")
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"{text!r} names a worker twice")
    return items


def core_list(text: str) -> tuple[int, ...]:
    """CPU ids, comma-separated ('0,1')."""
    try:
        cores = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of CPU ids") \
            from None
    if any(c < 0 for c in cores) or len(set(cores)) != len(cores):
        raise argparse.ArgumentTypeError(f"{text!r}: CPU ids are distinct and not negative")
    return cores
