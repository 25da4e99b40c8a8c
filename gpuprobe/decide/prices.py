"""What a device-hour costs, so every decision can say $ per million tokens.

A price given by the user (`--cost-per-device-hour`) is used as given. Without one, a list
price is assumed from the dated table below and the answer says so ("list price assumed").
One provider's on-demand list is used for every row, so that the devices compare with each
other on one basis; a user's own contract price is what `--cost-per-device-hour` is for.

Sources (docs/decide.md, "Prices"): Modal's per-second on-demand rates, as quoted from
modal.com/pricing on 2026-05-07 (H100 $3.9492/h, A100 80GB $2.4984/h, L40S $1.9512/h;
techbytes.app's price matrix) and on 2026-06-27 (CPU $0.0000131 per physical core-second,
B200 $6.25/h; beam.cloud's and blaxel.ai's Modal price reviews). H200: $0.001261/s on the same
list. A profile that names no GPU (a profile of the CPU reference server, the demo's) is
priced as this machine's cores at the CPU rate: on a CPU the "device" is the set of cores
the server's workers run on.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

PRICES_DATE = "2026-06"
PRICES_SOURCE = "Modal on-demand list"
# USD per device-hour, by a name fragment of the device (matched lowercase, first hit wins)
GPU_HOUR_USD = (("b200", 6.25), ("h200", 4.54), ("h100", 3.95), ("a100", 2.50), ("l40s", 1.95))
CPU_CORE_HOUR_USD = 0.0000131 * 3600  # $0.047 a physical core-hour


@dataclass(frozen=True)
class Price:
    """usd_per_device_hour, and in words where it comes from; assumed: a list price the
    user did not give."""

    usd_per_device_hour: float
    basis: str
    assumed: bool


def device_price(profile_meta: dict | None, given: float | None = None,
                 num_cores: int | None = None) -> Price:
    """The price of one device of the profile's kind: `given` when the user gave one, else
    the list price of the GPU its meta names (gpu, device_name, device, prefill_gpu; one not
    in the table as an H100), else the CPU rate times `num_cores` (default: this machine's
    cores)."""
    if given is not None:
        return Price(float(given), f"${given:g} per device-hour, as given", False)
    name = gpu_name(profile_meta or {})
    if name:
        for key, usd in GPU_HOUR_USD:
            if key in name.lower():
                return Price(usd, f"list price assumed: {name} at ${usd:.2f} per GPU-hour "
                             f"({PRICES_SOURCE}, {PRICES_DATE})", True)
        usd = dict(GPU_HOUR_USD)["h100"]  # the most common serving GPU stands in, and says so
        return Price(usd, f"list price assumed: {name} is not in the price table, priced as an "
                     f"H100 at ${usd:.2f} per GPU-hour ({PRICES_SOURCE}, {PRICES_DATE})", True)
    cores = int(num_cores or os.cpu_count() or 1)
    usd = cores * CPU_CORE_HOUR_USD
    return Price(usd, f"list price assumed: the profile names no GPU, so a device is taken as "
                 f"a CPU server of {cores} cores at ${CPU_CORE_HOUR_USD:.3f} per core-hour "
                 f"(${usd:.3f} per device-hour; {PRICES_SOURCE}, {PRICES_DATE})", True)


def gpu_name(meta: dict) -> str | None:
    """The device a profile's meta names (roofline: gpu; others may say device), or None."""
    for key in ("gpu", "device_name", "device", "prefill_gpu"):
        v = meta.get(key)
        if isinstance(v, str) and v and v.lower() not in ("cpu", "cuda"):
            return v
    return None


def cost_per_million(usd_per_device_hour: float, goodput_rps_per_device: float | None,
                     mean_output_tokens: float) -> float | None:
    """USD per million output tokens at the goodput: the device-hour over the output tokens
    a device serves in an hour within the SLO; None where it serves none."""
    if not goodput_rps_per_device or goodput_rps_per_device <= 0 or mean_output_tokens <= 0:
        return None
    return usd_per_device_hour / (goodput_rps_per_device * mean_output_tokens * 3600.0) * 1e6
