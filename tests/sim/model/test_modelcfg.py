"""A model from its config.json: KV bytes per rank, parameters and the compute shape follow from the layers."""

from __future__ import annotations

import json
import os

import pytest

from sim.base.errors import InputError
from sim.model.modelcfg import attention_family, bundled_configs, derive, load_config, model_spec
from sim.model.pools import get_model


def shape(name: str, **kw):
    cfg, label = load_config(name)
    return derive(cfg, name=label, **kw)


def test_the_validation_models_ship():
    assert {"qwen3-14b", "llama-3.1-8b", "deepseek-v3", "deepseek-v4-flash"} <= set(bundled_configs())


class TestGQA:
    def test_kv_heads_split_over_tp(self):
        # Qwen3-14B: 40 layers x 8 KV heads x 128 dim x (K and V) x 2 B (bf16) = 163,840 B/token in all.
        assert shape("qwen3-14b").kv_bytes_per_token == 163_840
        assert shape("qwen3-14b", tp_size=2).kv_bytes_per_token == 81_920

    def test_more_ranks_than_kv_heads_replicate_one_head_per_rank(self):
        # Llama-3.1-8B has 8 KV heads: at TP16 each rank still holds one.
        assert shape("llama-3.1-8b", tp_size=16).kv_bytes_per_token == 2 * 32 * 1 * 128 * 2

    def test_fp8_kv_halves_the_bytes(self):
        assert shape("qwen3-14b", kv_dtype="fp8_e4m3").kv_bytes_per_token == 81_920

    def test_parameters_match_the_published_size(self):
        s = shape("qwen3-14b", tp_size=2)
        assert s.params == pytest.approx(14.8e9, rel=0.01)
        assert s.active_params == s.params and s.n_experts == 0
        assert s.weight_bytes_per_rank == pytest.approx(s.params * 2 / 2)
        assert s.attn_flops_per_pair == 4 * 40 * 40 * 128 / 2


class TestMLA:
    def test_latent_kv_is_replicated_on_every_rank(self):
        # DeepSeek-V3: 61 layers x (512 latent + 64 rope); bf16 by default, the catalog's 35,136 B in fp8.
        assert shape("deepseek-v3", tp_size=8).kv_bytes_per_token == 61 * 576 * 2
        assert shape("deepseek-v3", tp_size=8, kv_dtype="fp8_e4m3").kv_bytes_per_token == 35_136

    def test_moe_counts_total_and_active_parameters(self):
        s = shape("deepseek-v3", tp_size=8)
        assert s.params == pytest.approx(671e9, rel=0.01)
        assert s.active_params == pytest.approx(37e9, rel=0.03)
        assert (s.n_experts, s.experts_per_token) == (256, 8)


class TestDeepSeekV4:
    def test_maps_to_the_catalog_pools(self):
        s = shape("deepseek-v4-flash", tp_size=8)
        assert s.catalog == "deepseek-v4-flash"
        spec = model_spec(s, 256)
        assert spec.bytes_per_page == 9_158_208 == get_model("deepseek-v4-flash").bytes_per_page

    def test_parameters_land_on_the_published_284b_and_13b(self):
        s = shape("deepseek-v4-flash", tp_size=8)
        assert s.params == pytest.approx(284e9, rel=0.02)
        assert s.active_params == pytest.approx(13e9, rel=0.05)
        assert s.compute_dtype == "fp8"

    def test_decode_reads_the_window_and_top_k_per_request_not_all_the_kv(self):
        s = shape("deepseek-v4-flash", tp_size=8)
        assert s.kv_read_bytes_per_token < s.kv_bytes_per_token / 10
        assert s.kv_read_bytes_per_request > 0


def test_a_single_pool_model_spec_carries_the_per_rank_bytes():
    spec = model_spec(shape("qwen3-14b", tp_size=2), 64)
    assert [p.name for p in spec.pools] == ["kv"] and spec.bytes_per_page == 81_920 * 64 and spec.layers == 40


def test_reads_a_config_json_by_path_and_a_nested_text_config(tmp_path):
    cfg, _ = load_config("qwen3-14b")
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"text_config": cfg}))
    loaded, name = load_config(str(folder))
    assert name == "my-model" and loaded["num_hidden_layers"] == 40


def test_bad_configs_are_one_line_errors(tmp_path):
    with pytest.raises(InputError, match="not a bundled config"):
        load_config("no-such-model")
    bad = tmp_path / "config.json"
    bad.write_text("{broken")
    with pytest.raises(InputError, match=r"config.json:1: malformed model config"):
        load_config(str(bad))
    cfg, _ = load_config("qwen3-14b")
    with pytest.raises(InputError, match="hidden_size"):
        derive({k: v for k, v in cfg.items() if k != "hidden_size"})
    with pytest.raises(InputError, match="kv_dtype"):
        derive(cfg, kv_dtype="int3")


def test_a_scenario_whose_model_is_a_config_json_path_runs(tmp_path, capsys):
    from importlib import resources

    from sim.app.cli import main

    (tmp_path / "config.json").write_text(resources.files("sim").joinpath("data", "models", "llama-3.1-8b.json").read_text())
    (tmp_path / "s.yaml").write_text(
        "name: llama\nmodel: {name: llama, config: config.json}\nhardware: {gpu: H100}\nhicache: {page_size: 16}\n"
        "workload: {kind: multi_turn, num_clients: 4, max_parallel: 2, num_rounds: 2, request_length: 512,"
        " output_length: 8, request_rate: null}\n"
    )
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "llama (1 pool)" in out and "8 finished" in out and "bench_multiturn summary" in out


# ------------------------------------------------------------------------ models by Hugging Face id


def test_a_model_named_by_its_hugging_face_id_reads_the_config_aiconfigurator_ships():
    pytest.importorskip("aiconfigurator_core")
    from sim.model.aic import model_config_path
    from sim.scenario.load import build_model_spec, scenario_from_dict

    sc = scenario_from_dict({"name": "pro", "model": "deepseek-ai/DeepSeek-V4-Pro", "hardware": {"gpu": "B200", "tp_size": 8, "kv_mem_gb": 40}})
    assert sc.model.config == "deepseek-ai/DeepSeek-V4-Pro" and "model.config" in sc.derived
    cfg = json.loads(model_config_path("deepseek-ai/DeepSeek-V4-Pro").read_text())
    assert sc.compute.n_experts == cfg["n_routed_experts"] == 384
    # The pools still come from the project's layer-structure formulas, and agree with the config read.
    spec, catalog = build_model_spec(sc), get_model("deepseek-v4-pro")
    assert spec.pools == catalog.pools and spec.bytes_per_page == catalog.bytes_per_page
    ratios = cfg["compress_ratios"][: cfg["num_hidden_layers"]]
    assert (spec.layers, ratios.count(4), ratios.count(128)) == (61, 30, 31)
    assert (spec.sliding_window, spec.index_topk) == (cfg["sliding_window"], cfg["index_topk"])


def test_a_v4_config_whose_layers_differ_from_the_catalog_pools_is_refused(tmp_path):
    cfg, _ = load_config("deepseek-v4-flash")
    cfg["compress_ratios"] = [4] * len(cfg["compress_ratios"])
    with pytest.raises(InputError, match="is not the layout of the catalog's deepseek-v4-flash"):
        derive(cfg, name="odd-v4")


def test_a_hugging_face_id_without_a_shipped_config_says_what_to_do(monkeypatch):
    import sim.model.aic

    monkeypatch.setattr(sim.model.aic, "_package_dir", lambda: None)
    sim.model.aic.shipped_models.cache_clear()
    try:
        with pytest.raises(InputError, match=r"needs aiconfigurator-core, installed with hicache-sim on Python 3.11-3.13"):
            load_config("deepseek-ai/DeepSeek-V4-Pro")
    finally:
        sim.model.aic.shipped_models.cache_clear()


def test_a_config_is_read_once_while_its_file_is_unchanged_and_again_once_it_changes(tmp_path, monkeypatch):
    import sim.model.modelcfg as modelcfg

    cfg, _ = load_config("qwen3-14b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    reads = []
    read = modelcfg._read_config
    monkeypatch.setattr(modelcfg, "_read_config", lambda *args: reads.append(args) or read(*args))
    first, _ = load_config(str(path))
    first["num_hidden_layers"] = 1  # the caller's own dict: the next caller still gets the file's
    assert load_config(str(path))[0]["num_hidden_layers"] == 40 and len(reads) == 1
    path.write_text(json.dumps({**cfg, "num_hidden_layers": 20}))  # the same size: the time tells it
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_config(str(path))[0]["num_hidden_layers"] == 20 and len(reads) == 2


def test_the_attention_family_is_the_derived_shapes():
    for name in ("qwen3-14b", "deepseek-v3", "deepseek-v3.2", "glm-5.1-fp8", "deepseek-v4-flash"):
        cfg, _ = load_config(name)
        assert attention_family(cfg) == derive(cfg, tp_size=8).family
