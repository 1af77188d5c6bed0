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


def _on(monkeypatch: pytest.MonkeyPatch, cpu: str, cpus: int) -> None:
    monkeypatch.setattr(devices, "cpu_name", lambda: cpu)
    monkeypatch.setattr(devices.os, "cpu_count", lambda: cpus)


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
    assert shipped.get("cpu") and shipped.get("cpus")  # the shipped local says where
    _on(monkeypatch, shipped["cpu"] + " (another)", int(shipped["cpus"]))
    assert main(["cost", "arch=tiny_gqa", "device=local", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert rep["latency_provenance"].startswith(f"warning: local was measured on {shipped['cpu']}")
    _on(monkeypatch, shipped["cpu"], int(shipped["cpus"]))
    assert main(["cost", "arch=tiny_gqa", "device=local", "format=json"]) == 0
    rep = json.loads(capsys.readouterr().out)["reports"][0]
    assert "warning" not in rep["latency_provenance"]
    _on(monkeypatch, "Another CPU", 64)
    assert main(["prune", "search_space=tiny", "device=local", "limit=20", "format=json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "not on this machine (Another CPU, 64 CPUs)" in out["latency_provenance"]
