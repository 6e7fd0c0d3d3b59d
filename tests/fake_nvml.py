"""A stand-in for ``pynvml`` (nvidia-ml-py) over scripted GPU states: the functions the
host sampler calls, with the real module's argument and return shapes (bus ids as
bytes, errors whose text is NVML's)."""

from __future__ import annotations

from types import SimpleNamespace

BUS = ["00000000:05:00.0", "00000000:06:00.0", "00000000:09:00.0", "00000000:0A:00.0"]


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - the name pynvml uses
    def __str__(self) -> str:
        return "Not Supported"


class FakeNvml:
    """The pynvml functions the sampler calls, over scripted GPU states."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2

    def __init__(self, links: dict[int, list[tuple[str, int]]], states: list[dict]) -> None:
        self.links = links  # gpu -> [(remote bus id, remote type)] per link
        self.states = states  # per gpu: sm, power, reasons, temp
        self.initialised = False
        self.calls = 0

    def nvmlInit(self):  # noqa: N802 - the API's names
        self.initialised = True

    def nvmlShutdown(self):  # noqa: N802
        self.initialised = False

    def nvmlDeviceGetCount(self):  # noqa: N802
        return len(self.states)

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return i

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):  # noqa: N802
        return f"GPU-{h:08d}"

    def nvmlDeviceGetPciInfo(self, h):  # noqa: N802
        return SimpleNamespace(busId=BUS[h].encode())  # bytes, as the real module returns

    def nvmlDeviceGetNvLinkState(self, h, link):  # noqa: N802
        if link >= len(self.links.get(h, [])):
            raise NVMLError_NotSupported()
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):  # noqa: N802
        return SimpleNamespace(busId=self.links[h][link][0].encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):  # noqa: N802
        return self.links[h][link][1]

    def nvmlDeviceGetClockInfo(self, h, kind):  # noqa: N802
        self.calls += 1
        return self.states[h]["sm"] if kind == 1 else 2619

    def nvmlDeviceGetMaxClockInfo(self, h, kind):  # noqa: N802
        return 1980

    def nvmlDeviceGetPowerUsage(self, h):  # noqa: N802
        return self.states[h]["power"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):  # noqa: N802
        return 700_000

    def nvmlDeviceGetTemperature(self, h, sensor):  # noqa: N802
        return self.states[h]["temp"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):  # noqa: N802
        return self.states[h]["reasons"]

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        raise NVMLError_NotSupported()


def gpu_states(n: int = 4) -> list[dict]:
    return [{"sm": 1980, "power": 500_000, "reasons": 0, "temp": 60} for _ in range(n)]
