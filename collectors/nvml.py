"""The one module that touches pynvml: lazy start, one choke point for calls, plain values out.

    nv = Nvml()                      # nothing happens yet; pass nvml=fake_module in tests
    if nv.start():                   # False on a machine without a driver (see nv.off_reason)
        for h in nv.handles(): ...
    nv.call("nvmlDeviceGetTemperature", h, nv.const("NVML_TEMPERATURE_GPU"))  # value or None

"No value" errors (NotSupported, NoPermission, FunctionNotFound, ...) become None; a lost GPU
raises GpuLost so that the caller can record it and carry on with the other GPUs.
"""
from __future__ import annotations

import importlib
from typing import Any

NO_DRIVER = "no NVIDIA driver found: GPU sampling off"

# Error codes that mean "this GPU or driver does not give this value": the reading is None.
_NO_VALUE = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND",
             "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_INSUFFICIENT_SIZE",
             "NVML_ERROR_TIMEOUT", "NVML_ERROR_UNKNOWN")
# Error codes that mean the device is gone until a reset.
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_UNINITIALIZED")
# Error codes of nvmlInit that mean "no usable driver on this machine".
_NO_DRIVER = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED",
              "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "NVML_ERROR_NO_PERMISSION",
              "NVML_ERROR_OPERATING_SYSTEM")


class GpuLost(Exception):
    """NVML says the GPU fell off the bus (or needs a reset); its readings stop."""


class Nvml:
    """Lazy NVML session over the pynvml module (or a fake with the same names)."""

    def __init__(self, nvml: Any = None):
        self._mod = nvml
        self.started = False
        self.off_reason: str | None = None

    def _codes(self, names: tuple[str, ...]) -> set[int]:
        return {getattr(self._mod, n) for n in names if hasattr(self._mod, n)}

    def start(self) -> bool:
        """Initialise NVML once; False (and off_reason set) when there is no usable driver."""
        if self.started or self.off_reason:
            return self.started
        try:
            if self._mod is None:
                self._mod = importlib.import_module("pynvml")
            self._mod.nvmlInit()
        except ImportError:
            self.off_reason = f"{NO_DRIVER} (pynvml is not installed)"
            return False
        except Exception as exc:  # NVMLError subclasses; OSError when libnvidia-ml is odd
            code = getattr(exc, "value", None)
            detail = str(exc) or type(exc).__name__
            if code is None or code in self._codes(_NO_DRIVER):
                self.off_reason = f"{NO_DRIVER} ({detail})"
            else:
                self.off_reason = f"GPU sampling off: NVML failed to start ({detail})"
            return False
        self.started = True
        return True

    def stop(self) -> None:
        if self.started:
            self.started = False
            try:
                self._mod.nvmlShutdown()
            except Exception:  # shutting down a dead driver is not worth a traceback
                pass

    def const(self, name: str, default: Any = None) -> Any:
        """A pynvml constant by name (None if this pynvml version lacks it)."""
        return getattr(self._mod, name, default)

    def has(self, name: str) -> bool:
        return hasattr(self._mod, name)

    def call(self, fn: str, *args: Any) -> Any:
        """pynvml.<fn>(*args); None for "no value" errors; GpuLost for a lost GPU.

        Other NVML errors also give None: one odd reading must not stop the sampling loop.
        """
        func = getattr(self._mod, fn, None)
        if func is None:
            return None
        try:
            return func(*args)
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code is not None and code in self._codes(_LOST):
                raise GpuLost(f"{fn}: {exc}") from None
            if code is None and not isinstance(exc, (OSError, AttributeError, TypeError, ValueError)):
                raise
            return None

    def field_values(self, handle: Any, field_ids: list) -> list[float | None]:
        """nvmlDeviceGetFieldValues decoded to numbers; None per field the GPU does not give.

        `field_ids` holds ids or (id, scope_id) pairs.
        """
        values = self.call("nvmlDeviceGetFieldValues", handle, field_ids)
        if values is None:
            return [None] * len(field_ids)
        return [_field_number(v, self._mod) for v in values]

    def handles(self) -> list[Any]:
        """One handle per visible GPU, in index order ([] when NVML is off)."""
        if not self.start():
            return []
        count = self.call("nvmlDeviceGetCount") or 0
        return [self.call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]


def text(value: Any) -> str:
    """NVML strings come back as bytes in old pynvml and str in new; always give str."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "" if value is None else str(value)


_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_number(value: Any, mod: Any) -> float | None:
    if getattr(value, "nvmlReturn", 0) != getattr(mod, "NVML_SUCCESS", 0):
        return None
    member = _VALUE_MEMBER.get(getattr(value, "valueType", 3), "ullVal")
    return float(getattr(value.value, member))
