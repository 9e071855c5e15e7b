"""The physical-floor gate's arithmetic and the NVML reading behind it, on CPU (no GPU, no NVML)."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pytest

from evalfarm.devices import DramPeak, dram_peak, nvml_clock_reader, nvml_clocks, peak_dram_bytes_s
from evalfarm.judge.floor import physical_floor
from evalfarm.judge.setup import cuda_identity
from evalfarm.result import Evidence, ScoreResult, _known
from evalfarm.verdict import Verdict

MB = 1 << 20
L2 = 50 * MB
H200 = peak_dram_bytes_s(3201, 6144)  # NVML's max memory clock and bus width of an H200


def test_peak_bandwidth_from_clock_and_bus_width():
    assert H200 == pytest.approx(4.92e12, rel=1e-3)
    assert peak_dram_bytes_s(2619, 5120) == pytest.approx(3.35e12, rel=1e-3)  # H100 SXM
    assert peak_dram_bytes_s(1593, 5120) == pytest.approx(2.04e12, rel=1e-3)  # A100 80GB


def test_floor_is_what_must_reach_dram_over_the_peak():
    out = 128 * MB
    c = physical_floor(out, L2, H200, cand_us=1000.0, ref_us=1000.0)
    assert c.applied and not c.violated
    assert c.floor_us == pytest.approx((out - L2) / H200 * 1e6)
    assert 15 < c.floor_us < 20  # 78 MiB at 4.9 TB/s


def test_exactly_at_the_floor_is_fine_and_below_is_flagged():
    out = 128 * MB
    floor_us = physical_floor(out, L2, H200, cand_us=1e9, ref_us=1e9).floor_us
    at = physical_floor(out, L2, H200, cand_us=floor_us, ref_us=100.0)
    assert at.applied and not at.violated and at.reason == ""
    below = physical_floor(out, L2, H200, cand_us=floor_us * 0.999, ref_us=100.0)
    assert below.applied and below.violated
    assert below.reason.startswith("guard physical_floor:")
    assert f"{floor_us:.2f} us" in below.reason and "TB/s" in below.reason


def test_small_outputs_are_never_flagged():
    for out in (0, 1, MB, L2, 2 * L2):
        c = physical_floor(out, L2, H200, cand_us=0.001, ref_us=100.0)
        assert not c.applied and not c.violated, out
        assert "fit in twice the L2" in c.note
    assert physical_floor(2 * L2 + 1, L2, H200, cand_us=0.001, ref_us=100.0).violated


def test_missing_nvml_or_l2_skips_the_gate_and_says_so():
    c = physical_floor(1 << 30, L2, None, cand_us=0.001, ref_us=100.0, peak_note="NVML unavailable: x")
    assert not c.applied and not c.violated and "NVML unavailable: x" in c.note
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        assert not physical_floor(1 << 30, L2, bad, cand_us=0.001, ref_us=100.0).applied
    c = physical_floor(1 << 30, None, H200, cand_us=0.001, ref_us=100.0)
    assert not c.applied and "L2 size unknown" in c.note


def test_a_reference_below_the_floor_disarms_it():
    # A reference that beats the floor returns views (or the reading is wrong): the bound is void.
    c = physical_floor(1 << 30, L2, H200, cand_us=0.001, ref_us=1.0)
    assert not c.applied and not c.violated and "reference's own median call" in c.note
    assert c.floor_us is not None and c.floor_us > 1.0


def test_floor_evidence_round_trips_and_older_readers_drop_it():
    c = physical_floor(1 << 30, L2, H200, cand_us=500.0, ref_us=600.0)
    ev = Evidence(device="cuda:0", physical_floor={**c.to_dict(), **DramPeak(H200, 3201, 6144, "by UUID").to_dict()})
    r = ScoreResult(verdict=Verdict.OK, speedup=1.2, evidence=ev)
    d = r.to_dict()
    back = ScoreResult.from_dict(d)
    assert back == r and back.evidence.physical_floor["applied"] is True
    assert back.evidence.physical_floor["floor_us"] == pytest.approx(c.floor_us)
    # A reader whose Evidence has no such field (an older client) drops it instead of failing.
    old_evidence = dataclasses.make_dataclass(
        "OldEvidence", [(f.name, Any, dataclasses.field(default=None))
                        for f in dataclasses.fields(Evidence) if f.name != "physical_floor"])
    old = old_evidence(**_known(old_evidence, d["evidence"]))
    assert old.device == "cuda:0" and not hasattr(old, "physical_floor")


# --- NVML, through a fake pynvml ---------------------------------------------------------------

class FakeNVML:
    NVML_CLOCK_MEM = 2

    def __init__(self, devices, fail_init=False):
        self.devices = devices  # {uuid: (pci (domain, bus, device), clock_mhz, bus_bits)}
        self.fail_init = fail_init
        self.calls: list[str] = []
        self.shutdown = False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls.append(f"uuid {uuid}")
        if uuid not in self.devices:
            raise RuntimeError("Not Found")
        return uuid

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id):
        self.calls.append(f"pci {bus_id}")
        for uuid, (pci, _, _) in self.devices.items():
            if f"{pci[0]:08X}:{pci[1]:02X}:{pci[2]:02X}.0" == bus_id:
                return uuid
        raise RuntimeError("Not Found")

    def nvmlDeviceGetPciInfo(self, handle):
        d, b, dev = self.devices[handle][0]
        return types.SimpleNamespace(domain=d, bus=b, device=dev)

    def nvmlDeviceGetMaxClockInfo(self, handle, which):
        assert which == self.NVML_CLOCK_MEM
        return self.devices[handle][1]

    def nvmlDeviceGetMemoryBusWidth(self, handle):
        return self.devices[handle][2]


UUID_A = "GPU-0f0e0d0c-0b0a-0908-0706-050403020100"
UUID_B = "GPU-11111111-2222-3333-4444-555555555555"
DEVICES = {UUID_A: ((0, 0x1B, 0), 3201, 6144), UUID_B: ((0, 0x43, 0), 2619, 5120)}


def test_nvml_device_is_matched_by_uuid_and_checked_by_pci():
    nv = FakeNVML(DEVICES)
    p = dram_peak(UUID_B[4:], (0, 0x43, 0), nvml=nv)  # torch prints the UUID without "GPU-"
    assert p.bytes_per_s == pytest.approx(peak_dram_bytes_s(2619, 5120))
    assert (p.mem_clock_mhz, p.bus_width_bits) == (2619, 5120)
    assert "UUID" in p.note and "agrees" in p.note and nv.shutdown
    # the PCI address disagrees with the UUID's device: ambiguous, no number
    p = dram_peak(UUID_B, (0, 0x1B, 0), nvml=FakeNVML(DEVICES))
    assert p.bytes_per_s is None and "ambiguous" in p.note


def test_nvml_falls_back_to_the_pci_address_never_to_an_index():
    nv = FakeNVML(DEVICES)
    p = dram_peak(None, (0, 0x1B, 0), nvml=nv)
    assert p.bytes_per_s == pytest.approx(H200) and nv.calls == ["pci 00000000:1B:00.0"]
    # an unknown UUID (e.g. a MIG instance's) with a PCI address: the address decides
    p = dram_peak("GPU-99999999-9999-9999-9999-999999999999", (0, 0x43, 0), nvml=FakeNVML(DEVICES))
    assert p.bytes_per_s == pytest.approx(peak_dram_bytes_s(2619, 5120)) and "PCI" in p.note
    # nothing to match by, or no match: unknown
    assert dram_peak(None, None, nvml=FakeNVML(DEVICES)).bytes_per_s is None
    assert dram_peak("GPU-99999999-9999-9999-9999-999999999999", None, nvml=FakeNVML(DEVICES)).bytes_per_s is None
    assert dram_peak(None, (0, 0x99, 0), nvml=FakeNVML(DEVICES)).bytes_per_s is None


def test_missing_nvml_is_reported_not_guessed(monkeypatch):
    p = dram_peak(UUID_A, None, nvml=FakeNVML(DEVICES, fail_init=True))
    assert p.bytes_per_s is None and p.note.startswith("NVML unavailable")
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    p = dram_peak(UUID_A, (0, 0x1B, 0))
    assert p.bytes_per_s is None and "pynvml" in p.note
    # zero readings are not usable either
    bad = {UUID_A: ((0, 0x1B, 0), 0, 6144)}
    assert dram_peak(UUID_A, None, nvml=FakeNVML(bad)).bytes_per_s is None


def test_cuda_identity_reads_uuid_and_pci_from_device_properties():
    props = types.SimpleNamespace(uuid="0f0e0d0c-0b0a-0908-0706-050403020100", pci_domain_id=0,
                                  pci_bus_id=0x1B, pci_device_id=0)
    assert cuda_identity(props) == ("0f0e0d0c-0b0a-0908-0706-050403020100", (0, 0x1B, 0))
    # older torch: no PCI fields; a UUID object without a usable str(): not used
    props = types.SimpleNamespace(uuid=object())
    assert cuda_identity(props) == (None, None)


class FakeNVMLClocks(FakeNVML):
    """The readings nvml_clocks takes, per device: (sm MHz, mem MHz, max sm MHz, temp C, power mW)."""

    NVML_CLOCK_SM = 0
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, devices, readings, **kw):
        super().__init__(devices, **kw)
        self.readings = readings

    def nvmlDeviceGetClockInfo(self, handle, which):
        return self.readings[handle][0 if which == self.NVML_CLOCK_SM else 1]

    def nvmlDeviceGetMaxClockInfo(self, handle, which):
        if which == self.NVML_CLOCK_SM:
            return self.readings[handle][2]
        return super().nvmlDeviceGetMaxClockInfo(handle, which)

    def nvmlDeviceGetTemperature(self, handle, which):
        return self.readings[handle][3]

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.readings[handle][4]


READINGS = {UUID_A: (1755, 3201, 1980, 41, 301250), UUID_B: (1980, 2619, 1980, 37, 129390)}


def test_clocks_come_from_nvml_for_the_runtimes_device_in_nvidia_smis_format():
    nv = FakeNVMLClocks(DEVICES, READINGS)
    assert nvml_clocks(UUID_B[4:], (0, 0x43, 0), nvml=nv) == {
        "sm_mhz": "1980", "mem_mhz": "2619", "max_sm_mhz": "1980", "temp_c": "37", "power_w": "129.39"}
    assert nv.shutdown
    # by PCI address alone, the other device
    assert nvml_clocks(None, (0, 0x1B, 0), nvml=FakeNVMLClocks(DEVICES, READINGS))["sm_mhz"] == "1755"


def test_clocks_are_none_where_nvml_cannot_say_for_sure():
    # ambiguous (UUID and PCI address disagree), unknown, nothing to match by, no NVML
    assert nvml_clocks(UUID_B, (0, 0x1B, 0), nvml=FakeNVMLClocks(DEVICES, READINGS)) is None
    assert nvml_clocks("GPU-99999999-9999-9999-9999-999999999999", None,
                       nvml=FakeNVMLClocks(DEVICES, READINGS)) is None
    assert nvml_clocks(None, None, nvml=FakeNVMLClocks(DEVICES, READINGS)) is None
    assert nvml_clocks(UUID_A, None, nvml=FakeNVMLClocks(DEVICES, READINGS, fail_init=True)) is None


class FakeNVMLReasons(FakeNVMLClocks):
    """A clock that moves between readings, with NVML's clock-event reasons."""

    def __init__(self, devices, readings, sm_seq, reasons=0x4):
        super().__init__(devices, readings)
        self.sm_seq = list(sm_seq)
        self.reasons = reasons

    def nvmlDeviceGetClockInfo(self, handle, which):
        return self.sm_seq.pop(0) if which == self.NVML_CLOCK_SM else super().nvmlDeviceGetClockInfo(handle, which)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.reasons


def test_the_clock_reader_reads_the_runtimes_device_each_time_it_is_called():
    read = nvml_clock_reader(UUID_B, (0, 0x43, 0), nvml=FakeNVMLReasons(DEVICES, READINGS, [1980, 1755]))
    assert read() == {"sm_mhz": 1980, "clock_reasons": 0x4}
    assert read() == {"sm_mhz": 1755, "clock_reasons": 0x4}
    assert read() == {}  # a reading that fails: nothing, never an error (the fake has no more)


def test_no_clock_reader_where_nvml_cannot_say_for_sure():
    assert nvml_clock_reader(UUID_B, (0, 0x1B, 0), nvml=FakeNVMLReasons(DEVICES, READINGS, [1])) is None
    assert nvml_clock_reader(None, None, nvml=FakeNVMLReasons(DEVICES, READINGS, [1])) is None
    assert nvml_clock_reader(UUID_A, None, nvml=FakeNVMLClocks(DEVICES, READINGS, fail_init=True)) is None
