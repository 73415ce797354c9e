"""An instance's pinned host pools against its platform's pinnable ceiling: the field, its default per platform,
the scenario check's refusal, and what validate and the run's summary say."""

import json
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.app.run import _pinned_line
from sim.model.hostpools import host_pool_bytes
from sim.scenario.load import load_scenario
from sim.scenario.pinned import pinned_bytes, pinned_lines, pinned_over, pinned_summary
from sim.scenario.resolve import resolve

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")
BIG = ["hicache.hicache_ratio=40", "hardware.host_mem_gb=35"]  # ~19.8 GB pinned: inside DRAM less 10 GiB


def quick(*sets):
    return load_scenario(QUICKSTART, list(sets))


@pytest.mark.parametrize("gpu, platform", [(None, "cuda"), ("H200", "cuda"), ("MI300X", "rocm"), ("mi355x", "rocm")])
def test_the_platform_follows_the_catalog_gpu(gpu, platform):
    sc = quick(*([f"hardware.gpu={gpu}"] if gpu else []))
    assert sc.hardware.platform == platform


def test_by_default_cuda_has_no_ceiling_and_rocm_half_of_host_mem_gb():
    assert quick().hardware.pinnable_gb is None
    assert quick().hardware.pin_ceiling.gb is None
    rocm = quick("hardware.gpu=MI355X", "hardware.host_mem_gb=3000").hardware.pin_ceiling
    assert rocm.gb == 1500.0 and rocm.source.startswith("ROCm default: half of hardware.host_mem_gb (3000 GB)")


def test_the_field_replaces_the_platforms_rule():
    c = quick("hardware.gpu=MI355X", "hardware.pinnable_gb=700").hardware.pin_ceiling
    assert (c.gb, c.source) == (700.0, "hardware.pinnable_gb")


def test_pinned_bytes_are_each_ranks_pools_times_the_ranks():
    sc = quick("hardware.tp_size=4")
    server = resolve(sc)
    per_rank = host_pool_bytes(server.model, server.l2_pages, server.l2_swa_pages, sc.hicache.page_size)
    assert per_rank > 0 and pinned_bytes(sc, server) == 4 * per_rank
    assert pinned_bytes(quick("hicache.enabled=false"), resolve(quick("hicache.enabled=false"))) == 0


def test_pools_inside_the_ceiling_pass_and_cuda_holds_what_rocm_refuses():
    cuda = quick(*BIG)  # the pools refused on ROCm below start on CUDA
    assert pinned_over(cuda) is None and pinned_bytes(cuda, resolve(cuda)) > 17.5e9
    assert pinned_over(quick(*BIG, "hardware.gpu=MI355X", "hardware.pinnable_gb=20")) is None


@pytest.mark.parametrize("sets, source", [
    (["hardware.gpu=MI355X", *BIG], "ROCm default: half of hardware.host_mem_gb (35 GB)"),
    (["hardware.pinnable_gb=0.5"], "(hardware.pinnable_gb)"),
])  # fmt: skip
def test_validate_and_run_refuse_pools_past_the_ceiling_in_one_line_naming_the_field(capsys, tmp_path, sets, source):
    for cmd in (["validate", QUICKSTART], ["run", QUICKSTART, "--out", str(tmp_path / "run"), "--no-progress"]):
        argv = [*cmd, *(a for s in sets for a in ("--set", s))]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert "hicache.hicache_ratio: host pools pin" in err and "past the pinnable ceiling" in err and source in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("sets", [["hardware.pinnable_gb=0"], ["hardware.pinnable_gb=-3"]])
def test_a_ceiling_not_above_zero_is_refused_at_the_yaml_edge(capsys, sets):
    assert main(["validate", QUICKSTART, "--set", sets[0]]) == 2
    assert "hardware.pinnable_gb" in capsys.readouterr().err


def test_validate_lists_the_pinned_pools_beside_the_ceiling_and_its_source():
    (line,) = pinned_lines(quick("hardware.gpu=MI355X", "hardware.host_mem_gb=13"))
    assert line.strip().startswith("pinned    1.0 GB host pools (1 rank); ceiling 6.5 GB <- ROCm default")
    (line,) = pinned_lines(quick())
    assert "ceiling <- CUDA default: none beyond hardware.host_mem_gb (2048 GB)" in line
    assert pinned_lines(quick("hicache.enabled=false")) == []


def test_a_runs_summary_json_carries_the_pinned_bytes_and_the_ceiling(tmp_path, capsys):
    assert main(["run", QUICKSTART, "--set", "hardware.gpu=MI355X", "--set", "workload.num_clients=4",
                 "--out", str(tmp_path / "run"), "--no-progress"]) == 0  # fmt: skip
    p = json.loads((tmp_path / "run" / "summary.json").read_text())["pinned_host"]
    assert p["pinnable_gb"] == 1024.0 and p["source"].startswith("ROCm default") and p["bytes"] > 0
    assert "pinned host pools 1.0 GB of 1,024.0 GB pinnable <- ROCm default" in capsys.readouterr().out


def test_the_summary_says_which_ceiling_applied_and_prints_it_where_one_does():
    sc = quick("hardware.pinnable_gb=3")
    p = pinned_summary(sc, resolve(sc))
    assert p == {"bytes": pinned_bytes(sc, resolve(sc)), "pinnable_gb": 3.0, "source": "hardware.pinnable_gb"}
    assert _pinned_line(p) == [f"pinned host pools {p['bytes'] / 1e9:,.1f} GB of 3.0 GB pinnable <- hardware.pinnable_gb"]
    assert _pinned_line(pinned_summary(quick(), resolve(quick()))) == []  # CUDA: DRAM alone, as before
