"""GPUs as NVML sees them: inventory, NVLinks, and clocks, power, temperature and
throttle reasons sampled during the run.

NVML comes from ``nvidia-ml-py`` (the ``[gpu]`` extra; module ``pynvml``). Without it,
without a driver, or on a host with no NVIDIA GPU, :func:`open_nvml` says why and the
sampler carries on without GPU series. Every NVML call is guarded: a query the GPU does
not support is dropped after its first refusal, so it costs nothing afterwards.
"""

from __future__ import annotations

from typing import Any

from syncpace.telemetry.netstats import NO_PORT, Series, Values

#: Throttle (clock event) reason bits, as NVML defines them.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

GPU_FIELDS = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "max_sm_clock_mhz",
    "power_mw",
    "power_limit_mw",
    "temperature_c",
    "throttle_reasons",
    "utilization_pct",
    "mem_utilization_pct",
)


def normalize_bus_id(bus: Any) -> str:
    """``b'00000000:07:00.0'`` -> ``'0000:07:00.0'`` (sysfs spelling)."""
    text = bus.decode() if isinstance(bus, bytes) else str(bus)
    text = text.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else text


def open_nvml(module: Any = None) -> tuple[Any | None, str | None]:
    """(the initialised NVML module, None) or (None, why not)."""
    if module is None:
        try:
            import pynvml as module  # optional: the [gpu] extra
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install 'syncpace[gpu]')"
    try:
        module.nvmlInit()
        if module.nvmlDeviceGetCount() == 0:
            module.nvmlShutdown()
            return None, "NVML sees no GPU"
    except Exception as exc:  # no driver, no device: NVML raises its own errors
        return None, f"NVML unavailable: {exc}"
    return module, None


class Gpus:
    """Every GPU of the host: its facts at start and its state at each sample."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles: list[Any] = []
        self.inventory: list[dict[str, Any]] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self.handles.append(handle)
            self.inventory.append(self._describe(index, handle))
        self.series: list[Series] = [
            ("gpu", g["pci"], NO_PORT, name) for g in self.inventory for name in GPU_FIELDS
        ]
        self._unsupported: set[str] = set()
        events = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = events or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def _call(self, key: str, fn: Any, *args: Any) -> Any:
        if key in self._unsupported:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if "Not Supported" in str(exc) or type(exc).__name__.endswith("NotSupported"):
                self._unsupported.add(key)
            return None

    def _describe(self, index: int, handle: Any) -> dict[str, Any]:
        n = self.nvml
        pci = self._call_once(lambda: n.nvmlDeviceGetPciInfo(handle).busId)
        links: dict[str, int] = {}
        switch_links = 0
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if n.nvmlDeviceGetNvLinkState(handle, link) != getattr(
                    n, "NVML_FEATURE_ENABLED", 1
                ):
                    continue
                remote = normalize_bus_id(n.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
                kind = self._call_once(
                    lambda lk=link: n.nvmlDeviceGetNvLinkRemoteDeviceType(handle, lk)
                )
            except Exception:  # no NVLink, or no more links
                break
            if kind == getattr(n, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2):
                switch_links += 1
            else:
                links[remote] = links.get(remote, 0) + 1
        return {
            "index": index,
            "name": _text(self._call_once(lambda: n.nvmlDeviceGetName(handle))),
            "uuid": _text(self._call_once(lambda: n.nvmlDeviceGetUUID(handle))),
            "pci": normalize_bus_id(pci) if pci is not None else f"nvml-{index}",
            "nvlinks": links,
            "nvswitch_links": switch_links,
        }

    @staticmethod
    def _call_once(fn: Any) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def nvlink_counts(self) -> dict[str, dict[str, int]]:
        """PCI address -> peer GPU address -> NVLinks between them; GPUs that reach each
        other through NVSwitches count the links both have into the switches."""
        out: dict[str, dict[str, int]] = {}
        for a in self.inventory:
            row = out.setdefault(a["pci"], dict(a["nvlinks"]))
            for b in self.inventory:
                if a is not b and a["nvswitch_links"] and b["nvswitch_links"]:
                    row[b["pci"]] = row.get(b["pci"], 0) + min(
                        a["nvswitch_links"], b["nvswitch_links"]
                    )
        return out

    def read(self) -> Values:
        n = self.nvml
        out: Values = []
        for i, h in enumerate(self.handles):
            util = self._call(f"{i}.util", n.nvmlDeviceGetUtilizationRates, h)
            out += [
                self._call(f"{i}.sm", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
                self._call(f"{i}.mem", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
                self._call(f"{i}.maxsm", n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
                self._call(f"{i}.power", n.nvmlDeviceGetPowerUsage, h),
                self._call(f"{i}.limit", n.nvmlDeviceGetEnforcedPowerLimit, h),
                self._call(f"{i}.temp", n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
                self._call(f"{i}.reasons", self._reasons, h),
                None if util is None else int(util.gpu),
                None if util is None else int(util.memory),
            ]
        return [None if v is None else int(v) for v in out]

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
