"""What processors a host has: GPUs read through nvidia-smi (so the caller never initialises
CUDA), in the order CUDA_VISIBLE_DEVICES gives them, and the CPU model; and a GPU's peak DRAM
bandwidth read through NVML (``dram_peak``), which does not initialise CUDA either."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # "9.0"
    uuid: str = ""  # "GPU-...": names one physical GPU whatever the index order

    @property
    def arch(self) -> str:
        major, minor = self.compute_cap.split(".")
        return f"sm_{major}{minor}"


@functools.cache
def list_gpus() -> tuple[GpuInfo, ...]:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES respected); empty without a driver."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,compute_cap,uuid", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) in (3, 4):
            gpus.append(GpuInfo(int(parts[0]), parts[1], parts[2], parts[3] if len(parts) == 4 else ""))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() != "":
        order = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        by_index = {g.index: g for g in gpus}
        gpus = [dataclasses.replace(by_index[i], index=k) for k, i in enumerate(order) if i in by_index]
    return tuple(gpus)


def gpu_names() -> list[str]:
    """Names of the visible GPUs in index order (the indices a ``cuda:N`` device uses)."""
    return [g.name for g in list_gpus()]


def gpu_uuids() -> list[str]:
    """UUIDs of the visible GPUs in index order ("" where nvidia-smi gave none)."""
    return [g.uuid for g in list_gpus()]


def cpu_name() -> str:
    """The CPU model, e.g. 'AMD EPYC 9454 48-Core Processor'."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def gpu_for(device: str) -> GpuInfo | None:
    if not device.startswith("cuda"):
        return None
    idx = int(device.split(":")[1]) if ":" in device else 0
    gpus = list_gpus()
    return gpus[idx] if idx < len(gpus) else None


def build_arch(device: str) -> str:
    """The target a candidate's extensions are built for: 'cpu' or the GPU's 'sm_XY'."""
    if not device.startswith("cuda"):
        return "cpu"
    gpu = gpu_for(device)
    if gpu is None:
        raise RuntimeError(f"no NVIDIA GPU for device {device!r} (nvidia-smi found none)")
    return gpu.arch


# --- peak DRAM bandwidth, from the driver's own description of the part -----------------------

@dataclasses.dataclass(frozen=True)
class DramPeak:
    """The device's theoretical peak DRAM bandwidth as NVML describes it, or why it is unknown."""

    bytes_per_s: float | None  # None: unknown, and nothing built on it may be applied
    mem_clock_mhz: int | None = None  # maximum memory clock
    bus_width_bits: int | None = None
    note: str = ""  # how the device was matched, or why the reading failed

    def to_dict(self) -> dict[str, Any]:
        return {"peak_dram_bytes_s": self.bytes_per_s, "mem_clock_max_mhz": self.mem_clock_mhz,
                "memory_bus_width_bits": self.bus_width_bits, "nvml": self.note}


def peak_dram_bytes_s(mem_clock_mhz: float, bus_width_bits: float) -> float:
    """Theoretical peak: max memory clock x bus width x 2 (double data rate) / 8 bits per byte.

    H100 SXM (2619 MHz, 5120 bits): 3.35e12 B/s; H200 (3201 MHz, 6144 bits): 4.92e12 B/s.
    """
    return mem_clock_mhz * 1e6 * bus_width_bits * 2 / 8


def dram_peak(uuid: str | None, pci: tuple[int, int, int] | None, nvml: Any = None) -> DramPeak:
    """Peak DRAM bandwidth of one CUDA device through NVML (``pynvml`` from nvidia-ml-py).

    The device is found by what identifies it physically, never by an index (NVML ignores
    CUDA_VISIBLE_DEVICES, the CUDA runtime does not): its UUID as the CUDA runtime reports it
    (``torch.cuda.get_device_properties(i).uuid``), checked against its PCI address when both are
    known, else its PCI address (domain, bus, device) alone. A MIG instance is measured by its
    parent GPU (the whole part's peak bounds any slice of it). Anything missing or inconsistent
    gives ``bytes_per_s=None`` with the reason in ``note``: this never guesses.
    """
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return DramPeak(None, note="NVML unavailable: pynvml (nvidia-ml-py) is not installed")
    if not uuid and pci is None:
        return DramPeak(None, note="NVML not consulted: the CUDA runtime gave neither a UUID nor a PCI address")
    try:
        nvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - NVMLError and friends: no NVML here
        return DramPeak(None, note=f"NVML unavailable: nvmlInit failed: {err}")
    try:
        return _dram_peak(nvml, uuid, pci)
    except Exception as err:  # noqa: BLE001
        return DramPeak(None, note=f"NVML query failed: {type(err).__name__}: {err}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _pci_string(pci: tuple[int, int, int]) -> str:
    domain, bus, device = pci
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _by_string(fn: Any, text: str) -> Any:
    """Call an NVML lookup with a str (current nvidia-ml-py) or bytes (older releases)."""
    try:
        return fn(text)
    except (TypeError, ctypes.ArgumentError):
        return fn(text.encode())


class _NoHandle(Exception):
    """NVML has no device that is surely the CUDA runtime's (the message says why)."""


def _device_handle(nv: Any, uuid: str | None, pci: tuple[int, int, int] | None) -> tuple[Any, str]:
    """The NVML handle of the CUDA runtime's device (a MIG instance: its parent GPU), and how it
    was matched; _NoHandle when it cannot be found for sure."""
    handle = None
    how = ""
    if uuid:
        ident = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        try:
            handle = _by_string(nv.nvmlDeviceGetHandleByUUID, ident)
            how = f"matched by UUID {ident}"
        except Exception as err:  # noqa: BLE001 - e.g. a MIG instance's UUID; the PCI address decides
            if pci is None:
                raise _NoHandle(f"NVML has no device with UUID {ident}: {err}") from None
            how = f"UUID {ident} unknown to NVML ({err}); "
    if handle is not None and hasattr(nv, "nvmlDeviceIsMigDeviceHandle"):
        try:
            is_mig = bool(nv.nvmlDeviceIsMigDeviceHandle(handle))
        except Exception:  # noqa: BLE001 - drivers without MIG: not a MIG handle
            is_mig = False
        if is_mig:  # the whole part's peak bounds any slice of it
            handle = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            how += " (a MIG instance: its parent GPU's peak)"
    if pci is not None:
        if handle is None:
            get = getattr(nv, "nvmlDeviceGetHandleByPciBusId_v2", None) or nv.nvmlDeviceGetHandleByPciBusId
            handle = _by_string(get, _pci_string(pci))
            how += f"matched by PCI address {_pci_string(pci)}"
        else:
            info = nv.nvmlDeviceGetPciInfo(handle)
            got = (int(info.domain), int(info.bus), int(info.device))
            if got != tuple(pci):
                raise _NoHandle(f"NVML's device with UUID {uuid} is at PCI {_pci_string(got)}, "
                                f"the CUDA runtime's at {_pci_string(pci)}: ambiguous, not used")
            how += f", PCI {_pci_string(pci)} agrees"
    return handle, how


def _dram_peak(nv: Any, uuid: str | None, pci: tuple[int, int, int] | None) -> DramPeak:
    try:
        handle, how = _device_handle(nv, uuid, pci)
    except _NoHandle as err:
        return DramPeak(None, note=str(err))
    clock = int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM))
    width = int(nv.nvmlDeviceGetMemoryBusWidth(handle))
    if clock <= 0 or width <= 0:
        return DramPeak(None, clock, width, note=f"NVML reported a max memory clock of {clock} MHz and a bus "
                        f"width of {width} bits: not usable")
    return DramPeak(peak_dram_bytes_s(clock, width), clock, width, note=how)


def _nvml_device(uuid: str | None, pci: tuple[int, int, int] | None, nvml: Any) -> tuple[Any, Any] | None:
    """(NVML, the runtime's device handle), NVML initialised; None when NVML is not installed, does
    not start, or cannot surely find the device (NVML shut down again then)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    if not uuid and pci is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError and friends: no NVML here
        return None
    try:
        handle, _how = _device_handle(nvml, uuid, pci)
    except Exception:  # noqa: BLE001 - _NoHandle, NVMLError
        _nvml_shutdown(nvml)
        return None
    return nvml, handle


def _nvml_shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass


def nvml_clock_reader(uuid: str | None, pci: tuple[int, int, int] | None,
                      nvml: Any = None) -> Callable[[], dict[str, int]] | None:
    """A reader of the device's SM clock right now and why it is not higher (NVML's clock-event
    reasons, a bit mask), NVML kept open for the process: ``{"sm_mhz": .., "clock_reasons": ..}``.
    None when NVML is not there or cannot surely find the device. A diagnostic (the round trace)."""
    opened = _nvml_device(uuid, pci, nvml)
    if opened is None:
        return None
    nv, handle = opened
    reasons = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))

    def read() -> dict[str, int]:
        try:
            out = {"sm_mhz": int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))}
            if reasons is not None:
                out["clock_reasons"] = int(reasons(handle))
            return out
        except Exception:  # noqa: BLE001 - a diagnostic: nothing rather than an error
            return {}

    return read


def nvml_clocks(uuid: str | None, pci: tuple[int, int, int] | None, nvml: Any = None) -> dict[str, str] | None:
    """The device's clocks, temperature and power right now, through NVML in this process
    (milliseconds; an ``nvidia-smi`` subprocess costs seconds on some hosts): ``sm_mhz``,
    ``mem_mhz``, ``max_sm_mhz``, ``temp_c``, ``power_w`` as strings, as ``nvidia-smi`` prints them.
    None when NVML is not installed, does not start, or cannot surely find the device."""
    opened = _nvml_device(uuid, pci, nvml)
    if opened is None:
        return None
    nv, handle = opened
    try:
        return {
            "sm_mhz": str(int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))),
            "mem_mhz": str(int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM))),
            "max_sm_mhz": str(int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM))),
            "temp_c": str(int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))),
            "power_w": f"{nv.nvmlDeviceGetPowerUsage(handle) / 1000:.2f}",
        }
    except Exception:  # noqa: BLE001 - NVMLError: the caller falls back
        return None
    finally:
        _nvml_shutdown(nv)
