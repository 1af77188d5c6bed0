"""`local` stands for the machine it is read on: where it was measured on another processor or
CPU count, its description (cost, prune, the front's report and dashboard) says that its
latencies and their +- are that machine's (`devices.measured_elsewhere`)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from archsearch.cli import main
from archsearch.cost import devices
from archsearch.cost.devices import describe_error, measured_elsewhere
from archsearch.latency import load_device

THERE = {"hostname": "vm", "cpu": "AMD EPYC", "cpus": "2", "torch": "2.13.0+cpu"}


def _on(monkeypatch: pytest.MonkeyPatch, cpu: str, cpus: int, isa: str = "avx512") -> None:
    """This machine made one of `cpus` processors named `cpu` with vector extension `isa`."""
    flags = {"avx512": "avx2 avx512f avx512bw", "avx2": "avx2"}[isa]
    monkeypatch.setattr(devices.os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(devices, "_cpuinfo", lambda: f"model name\t: {cpu}\nflags\t\t: {flags}\n")


def _local(measured_on: dict[str, str], name: str = "local") -> devices.DeviceProfile:
    return dataclasses.replace(load_device("local"), name=name, measured_on=measured_on)


@pytest.mark.parametrize(
    ("cpu", "cpus", "noted"),
    [("AMD EPYC", 2, False), ("Intel(R) Xeon(R) Processor", 2, True), ("AMD EPYC", 8, True)],
)
def test_local_measured_on_another_processor_or_cpu_count_says_so(monkeypatch, cpu, cpus, noted):
    _on(monkeypatch, cpu, cpus)
    dev = _local(THERE)
    note = measured_elsewhere(dev)
    assert (note is not None) == noted
    text = describe_error(dev)
    assert text.startswith("warning: ") == noted
    assert text.endswith(describe_error(dataclasses.replace(dev, name="mine"))[len("mine") :])
    if noted:
        assert note is not None
        assert "AMD EPYC (2 CPUs)" in note and f"{cpu}, {cpus} CPUs" in note
        assert "archsearch calibrate" in note and note in text


def test_other_profiles_and_unstated_machines_carry_no_note(monkeypatch):
    """A named device's profile (calibrated on a Ray node, say) is meant to be read anywhere; a
    profile that does not say where it was measured cannot be compared."""
    _on(monkeypatch, "Intel(R) Xeon(R) Processor", 2)
    assert measured_elsewhere(_local(THERE, name="rpi5_measured")) is None
    assert measured_elsewhere(_local({})) is None
    assert measured_elsewhere(load_device("rpi5")) is None
    assert measured_elsewhere(_local({"cpu": "AMD EPYC"})) is not None  # cpus unstated


def test_cost_and_prune_show_the_note_for_local_measured_elsewhere(monkeypatch, capsys):
    shipped = load_device("local").measured_on
    assert shipped.get("cpu") and shipped.get("cpus") and shipped.get("isa")  # it says where
    _on(monkeypatch, shipped["cpu"] + " (another)", int(shipped["cpus"]))
    assert main(["cost", "arch=tiny_gqa", "device=local", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert rep["latency_provenance"].startswith(f"warning: local was measured on {shipped['cpu']}")
    _on(monkeypatch, shipped["cpu"], int(shipped["cpus"]), shipped["isa"])
    assert main(["cost", "arch=tiny_gqa", "device=local", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert "warning" not in rep["latency_provenance"]
    _on(monkeypatch, shipped["cpu"], int(shipped["cpus"]), "avx2")  # the same name, AVX2
    assert main(["cost", "arch=tiny_gqa", "device=local", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert f"{shipped['cpus']} CPUs, avx512), not on this machine" in rep["latency_provenance"]
    _on(monkeypatch, "Another CPU", 64)
    assert main(["prune", "search_space=tiny", "device=local", "limit=20", "format=json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "not on this machine (Another CPU, 64 CPUs, avx512)" in out["latency_provenance"]


def _x86(model: str, flags: str, family: int = 25) -> str:
    """/proc/cpuinfo of a two-CPU x86 machine (a block per processor, a blank line between)."""
    block = (
        f"processor\t: {{i}}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n"
        f"model\t\t: {model}\nmodel name\t: AMD EPYC\nflags\t\t: fpu {flags}\n"
    )
    return "\n".join(block.format(i=i) for i in range(2))


ZEN4 = _x86("17", "avx avx2 avx512f avx512dq avx512bw avx512vl")
ZEN3 = _x86("1", "avx avx2 fma")
ZEN5 = _x86("2", "avx avx2 avx512f avx512dq avx512bw avx512vl", family=26)
PHI = _x86("87", "avx avx2 avx512f avx512pf", family=6)  # AVX-512 foundation alone: AVX2 kernels
NEOVERSE = "\n".join(  # arm64: a block per processor, then the board's
    f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd0c\n"
    for i in range(2)
)
PI32 = (  # 32-bit Raspberry Pi OS: neon, not asimd
    "processor\t: 0\nmodel name\t: ARMv7 Processor rev 3 (v7l)\n"
    "Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt\n"
    "CPU implementer\t: 0x41\nCPU part\t: 0xd08\n\nHardware\t: BCM2835\n"
)


@pytest.mark.parametrize(
    ("info", "isa", "cpu_id"),
    [
        (ZEN4, "avx512", "family 25 model 17"),
        (ZEN3, "avx2", "family 25 model 1"),
        (PHI, "avx2", "family 6 model 87"),
        ("flags : fpu sse4_2\n", "sse4.2", None),
        (NEOVERSE + "\nHardware\t: a board\n", "sve", "implementer 0x41 part 0xd0c"),
        (PI32, "neon", "implementer 0x41 part 0xd08"),
        ("", None, None),
    ],
)
def test_processor_records_the_vector_extension_and_the_id_cpuinfo_gives(
    monkeypatch, info, isa, cpu_id
):
    monkeypatch.setattr(devices, "_cpuinfo", lambda: info)
    got = devices.processor()
    assert got.get("isa") == isa and got.get("cpu_id") == cpu_id
    assert set(got) <= set(devices.IDENTITY) and got["cpus"] == str(devices.os.cpu_count() or 1)


def test_local_of_one_name_but_another_generation_says_so(monkeypatch):
    """Two virtual machines both name their processor "AMD EPYC"; one has AVX-512 and the
    other does not, and their GEMMs run at different speeds: the extension and the id decide."""
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(devices, "_cpuinfo", lambda: ZEN4)
    there = {**THERE, **{k: devices.processor()[k] for k in ("isa", "cpu_id")}}
    assert measured_elsewhere(_local(there)) is None
    monkeypatch.setattr(devices, "_cpuinfo", lambda: ZEN3)
    note = measured_elsewhere(_local(there))
    assert note is not None
    assert "AMD EPYC (2 CPUs, avx512, family 25 model 17)" in note
    assert "not on this machine (AMD EPYC, 2 CPUs, avx2, family 25 model 1)" in note
    assert measured_elsewhere(_local(THERE)) is None  # a profile that does not state them
    monkeypatch.setattr(devices, "_cpuinfo", lambda: ZEN5)  # AVX-512 too, another generation
    note = measured_elsewhere(_local(there))
    assert note is not None and "(AMD EPYC, 2 CPUs, avx512, family 26 model 2)" in note
    monkeypatch.setattr(devices, "_cpuinfo", lambda: "model name : AMD EPYC\n")
    note = measured_elsewhere(_local(there))  # this machine does not tell: not the same
    assert note is not None and "(AMD EPYC, 2 CPUs, ?, ?)" in note
