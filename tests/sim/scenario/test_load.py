"""The scenario schema: shipped files validate, defaults are SGLang's, and every bad input gets a one-line error
naming its file (or ``--set``) and field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

import sim.scenario.load
from sim.base.errors import InputError
from sim.scenario.load import (
    HiCacheConfig,
    MultiTurnWorkload,
    Scenario,
    SyntheticWorkload,
    TraceWorkload,
    apply_overrides,
    build_model_spec,
    dump_resolved,
    field_paths,
    load_scenario,
    rebase_paths,
    scenario_from_dict,
)
from sim.scenario.validate import validate_file

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
SHIPPED = sorted(SCENARIOS.glob("*.yaml"))


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, "errors are one line"
    return message


class TestShippedScenarios:
    def test_the_expected_scenarios_ship(self):
        names = {p.stem for p in SHIPPED}
        assert {
            "quickstart",
            "dsv4_flash_multiturn_l1",
            "dsv4_flash_multiturn_l1l2",
            "dsv41_flash_multiturn_l1",
            "dsv41_flash_multiturn_l1l2",
            "dsv4_flash_l3_two_instances",
            "mooncake_conversation",
            "mla_baseline_multiturn",
        } <= names

    @pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
    def test_validates_and_explains_itself(self, path: Path):
        """Each file loads, starts with a comment saying what it shows, and round-trips through a resolved dump."""
        text = path.read_text()
        assert text.startswith("#")
        try:
            scenario = load_scenario(path)
        except InputError as exc:
            if "file not found" in str(exc) and "workload.path" in str(exc):
                pytest.skip(f"trace not bundled yet: {exc}")
            raise
        assert scenario.name == path.stem
        assert scenario_from_dict(yaml.safe_load(dump_resolved(scenario))) == scenario

    def test_l1_and_l1l2_pairs_differ_only_in_hicache(self):
        for model in ("dsv4_flash", "dsv41_flash"):
            l1 = load_scenario(SCENARIOS / f"{model}_multiturn_l1.yaml")
            l1l2 = load_scenario(SCENARIOS / f"{model}_multiturn_l1l2.yaml")
            assert not l1.hicache.enabled and l1l2.hicache.enabled
            assert l1.hardware == l1l2.hardware and l1.workload == l1l2.workload and l1.model == l1l2.model


class TestDefaults:
    def test_a_name_is_all_a_scenario_needs(self):
        scenario = scenario_from_dict({"name": "x"})
        assert scenario.model.name == "deepseek-v4-flash"
        assert isinstance(scenario.workload, MultiTurnWorkload)

    def test_hicache_defaults_are_sglangs(self):
        hc = HiCacheConfig()
        assert (hc.page_size, hc.hicache_ratio, hc.write_policy) == (256, 2.0, "write_through")
        assert (hc.load_back_threshold, hc.prefetch_threshold, hc.prefetch_policy) == (10, 256, "timeout")
        assert (hc.io_backend, hc.mem_layout, hc.swa_full_tokens_ratio) == ("kernel", "page_first", 0.1)
        assert hc.write_through_threshold == 1
        assert hc.prefetch_timeout_s(2048) == pytest.approx(1.5)

    def test_selective_and_write_back_back_up_on_the_second_hit(self):
        assert HiCacheConfig(write_policy="write_through_selective").write_through_threshold == 2
        assert HiCacheConfig(write_policy="write_back").write_through_threshold == 2

    def test_multiturn_defaults_are_bench_multiturns(self):
        wl = MultiTurnWorkload()
        assert (wl.num_clients, wl.max_parallel, wl.request_length, wl.output_length, wl.num_rounds) == (
            256,
            128,
            512,
            64,
            5,
        )
        assert (wl.request_rate, wl.distribution) == (1.0, "poisson")

    def test_other_sections_match_the_reference_numbers(self):
        s = scenario_from_dict({"name": "x"})
        assert (s.l3.read_gbps, s.l3.write_gbps, s.l3.io_batch_pages, s.l3.enabled) == (
            0.57,
            0.16,
            128,
            False,
        )
        assert (s.hisparse.device_buffer_size, s.hisparse.top_k, s.hisparse.policy) == (4096, None, "lru")
        assert (s.hardware.gpu_mem_gb, s.hardware.hbm_bandwidth_tbps, s.hardware.peak_tflops) == (
            141.0,
            4.8,
            989.0,
        )

    def test_hisparse_top_k_falls_back_to_the_models_index_topk(self):
        decode = {"cluster": {"role": "decode"}, "hisparse": {"enabled": True}, "workload": {"kind": "synthetic"}}
        assert scenario_from_dict({"name": "x", **decode}).hisparse_top_k == 512
        assert scenario_from_dict({"name": "x", "model": "deepseek-v4-pro", **decode}).hisparse_top_k == 1024

    def test_io_backend_and_layout_resolve_as_sglang_does(self):
        assert HiCacheConfig(io_backend="direct").mem_layout == "page_first_direct"
        assert HiCacheConfig(mem_layout="page_first_direct").io_backend == "direct"
        assert HiCacheConfig(io_backend="direct").cost_backend == "copy_engine"

    def test_a_model_name_string_and_mapping_are_the_same(self):
        assert scenario_from_dict({"name": "x", "model": "deepseek-v4-pro"}) == scenario_from_dict(
            {"name": "x", "model": {"name": "deepseek-v4-pro"}}
        )

    def test_inline_pools_derive_hit_policy_from_the_anchor(self):
        model = {
            "name": "mine",
            "pools": [
                {"name": "kv", "bytes_per_page": 0},
                {"name": "swa", "layers": 43, "bytes_per_slot": 584, "align": 576},
                {
                    "name": "c4",
                    "anchor": "kv",
                    "layers": 21,
                    "bytes_per_slot": 584,
                    "compress_ratio": 4,
                    "align": 576,
                },
                {"name": "c4_state", "anchor": "swa", "bytes_per_page": 1_720_320},
            ],
        }
        s = scenario_from_dict({"name": "x", "model": model})
        policies = {p.name: p.hit_policy for p in s.model.pools}
        assert policies == {
            "kv": "ALL_PAGES",
            "swa": "TRAILING_PAGES",  # the swa anchor and its sidecars: only the trailing window counts
            "c4": "ALL_PAGES",
            "c4_state": "TRAILING_PAGES",
        }
        assert s.model.pools[1].page_bytes(256) == 6_439_680  # the V4-Flash SWA figure
        assert s.model.pools[2].page_bytes(256) == 786_240  # the V4-Flash C4 figure
        spec = build_model_spec(s)
        assert [p.anchor for p in spec.pools] == ["kv", "swa", "kv", "swa"]
        assert spec.bytes_per_page == 6_439_680 + 786_240 + 1_720_320

    def test_yaml_exponents_without_a_dot_or_sign_are_numbers(self, tmp_path):
        path = write(tmp_path, "name: x\ncompute:\n  prefill_flops_per_token: 2e10\n")
        assert load_scenario(path).compute.prefill_flops_per_token == 2e10

    def test_a_negative_zero_is_a_zero(self):
        """-0.0 passes a field's ``ge=0`` but numpy's samplers refuse it as a negative scale ("sigma < 0")."""
        s = load_scenario(SCENARIOS / "quickstart.yaml", ["workload.kind=agentic", "workload.growth_sigma=-0.0"])
        assert math.copysign(1.0, s.workload.growth_sigma) == 1.0


class TestErrors:
    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ("hicache:\n  load_back_threshold: -1\n", "hicache.load_back_threshold: must be >= 0"),
            ("hicache:\n  prefech_threshold: 1\n", "hicache.prefech_threshold: unknown field"),
            ("workload:\n  num_clients: abc\n", "workload.num_clients: expected an integer, got 'abc'"),
            ("workload:\n  kind: nope\n", "workload.kind: expected one of"),
            ("workload:\n  rate: 2\n", "workload.rate: unknown field"),
            ("hardware:\n  kv_mem_gb: 200\n", "hardware.kv_mem_gb: KV memory larger than the GPU"),
            ("hicache:\n  hicache_ratio: 0\n", "hicache.hicache_ratio: must be > 0"),
            ("hicache:\n  hicache_ratio: 1.0e-5\nhardware:\n  kv_mem_gb: 1\n", "hicache.hicache_ratio: host pool smaller than one page"),
            ("hicache:\n  host_pages: 0\n", "hicache.host_pages: must be >= 1"),
            ("hicache:\n  write_policy: wb\n", "hicache.write_policy: expected one of"),
            (
                "model: deepseek-v4-flsh\n",
                "model.name: unknown model 'deepseek-v4-flsh' (did you mean deepseek-v4-flash?)",
            ),
            ("model: generic\n", "model.generic_bytes_per_token: required for the generic model"),
            ("l3:\n  enabled: true\nhicache:\n  enabled: false\n", "l3.enabled: L3 needs hicache.enabled"),
            ("hisparse:\n  enabled: true\n", "hisparse.enabled: HiSparse runs only on decode instances"),
            (
                "workload:\n  kind: trace\n  path: missing.jsonl\n",
                "workload.path: file not found: missing.jsonl",
            ),
            ("hardware:\n  cost_table: nope.json\n", "hardware.cost_table: file not found"),
            ("workload:\n  kind: trace\n  path: " + "x" * 300 + "\n",  # a name the system refuses to look up
             "workload.path: cannot use " + "x" * 80 + "...: File name too long"),
            ("workload:\n  kind: trace\n  path: ~nosuchuser/t.jsonl\n",
             "workload.path: cannot use ~nosuchuser/t.jsonl: Could not determine home directory"),
            ("cluster:\n  instances: 0\n", "cluster.instances: must be >= 1"),
            ("hicache:\n  enabled: 1\n", "hicache.enabled: expected true or false, got 1"),
            ("seed: -1\n", "seed: must be >= 0"),
            ("duration_s: .inf\n", "duration_s: must be a finite number, got inf"),
            ("hicache:\n  hicache_ratio: .nan\n", "hicache.hicache_ratio: must be a finite number"),
            ("cluster:\n  instances: 100000\n", "cluster.instances: must be <= 1024"),
            ("compute:\n  mfu: 1.0e-30\n", "compute.mfu: must be >= 0.01"),
            ("workload:\n  request_length: 100000000\n", "workload.request_length: must be <= 4194304"),
            ("workload:\n  num_rounds: 1000\n  request_length: 8192\n",
             "workload.num_rounds: the last round reaches 8,256,000 tokens, over the limit"),
            ("workload:\n  num_clients: 10000000\n", "workload.num_clients: num_clients x num_rounds = 50,000,000"),
            ("workload:\n  kind: synthetic\n  num_requests: 10000000\n  input_length: 4096\n",
             "workload: 160,000,000 page keys of 256 tokens, over the limit of 50,000,000"),
            ("cluster:\n  role: decode\n", "workload.kind: a decode timeline (cluster.role: decode, or HiSparse on) needs"),
            ("cluster:\n  role: decode\nworkload:\n  kind: synthetic\nhisparse:\n  enabled: true\n"
             "  step_windows: 1000\n  window_steps: 4096\n", "hisparse.sample_requests: 8,388,608,000 top-k ids"),
        ],
    )
    def test_bad_field_names_file_and_path(self, tmp_path, body, expected):
        path = write(tmp_path, "name: x\n" + body)
        assert error_of(load_scenario, path).startswith(f"{path}: {expected}")

    @pytest.mark.parametrize("name", ["../../x", "a/b", "/abs", "", ".hidden", "x" * 101, "a b"])
    def test_a_name_cannot_leave_the_output_folder(self, tmp_path, name):
        path = write(tmp_path, f"name: {name!r}\n")
        assert error_of(load_scenario, path).startswith(f"{path}: name: use letters, digits")

    def test_a_binary_file_is_an_input_error(self, tmp_path):
        path = tmp_path / "s.yaml"
        path.write_bytes(b"name: x\n\xff\xfe\x00")
        assert error_of(load_scenario, path) == f"{path}: not a UTF-8 text file (byte 8)"

    def test_unknown_field_suggests_the_near_miss(self, tmp_path):
        path = write(tmp_path, "name: x\nhicache:\n  prefech_threshold: 1\n")
        assert "did you mean prefetch_threshold?" in error_of(load_scenario, path)

    def test_malformed_yaml_names_file_and_line(self, tmp_path):
        path = write(tmp_path, "name: x\nhicache:\n  enabled: [true\n  page_size: 256\n")
        message = error_of(load_scenario, path)
        assert message.startswith(f"{path}:") and "malformed YAML" in message
        assert int(message.split(":")[1]) in (3, 4, 5)

    def test_duplicate_keys_are_rejected_with_their_line(self, tmp_path):
        path = write(tmp_path, "name: x\nseed: 1\nseed: 2\n")
        assert error_of(load_scenario, path) == f"{path}:3: malformed YAML: duplicate key 'seed'"

    def test_a_top_level_that_is_not_a_mapping(self, tmp_path):
        assert "expected a mapping" in error_of(load_scenario, write(tmp_path, "- a\n- b\n"))

    def test_a_missing_file(self, tmp_path):
        assert error_of(load_scenario, tmp_path / "none.yaml").startswith(
            f"{tmp_path / 'none.yaml'}: cannot read"
        )


class TestOverrides:
    def test_overrides_apply_as_yaml_values(self, tmp_path):
        path = write(tmp_path, "name: x\nmodel: deepseek-v4-flash\n")
        s = load_scenario(
            path, ["hicache.load_back_threshold=64", "workload.num_clients=32", "model=deepseek-v4.1-flash"]
        )
        assert s.hicache.load_back_threshold == 64
        assert s.workload.num_clients == 32
        assert s.model.name == "deepseek-v4.1-flash"

    def test_an_override_naming_no_field(self, tmp_path):
        path = write(tmp_path, "name: x\n")
        assert (
            error_of(load_scenario, path, ["hicache.foo=1"])
            == "--set hicache.foo=1: hicache.foo: unknown field"
        )

    def test_a_bad_override_value_blames_the_override(self, tmp_path):
        path = write(tmp_path, "name: x\n")
        message = error_of(load_scenario, path, ["workload.num_clients=abc"])
        assert (
            message == "--set workload.num_clients=abc: workload.num_clients: expected an integer, got 'abc'"
        )

    def test_an_override_without_equals(self, tmp_path):
        assert "expected key.path=value" in error_of(
            load_scenario, write(tmp_path, "name: x\n"), ["hicache.enabled"]
        )

    def test_switching_workload_kind_starts_the_section_afresh(self):
        data = {"name": "x", "workload": {"kind": "multi_turn", "num_clients": 4}}
        out = apply_overrides(data, ["workload.kind=synthetic", "workload.rate=3"])
        assert out["workload"] == {"kind": "synthetic", "rate": 3}
        assert data["workload"]["num_clients"] == 4, "the input is not modified"
        assert isinstance(scenario_from_dict(out).workload, SyntheticWorkload)

    def test_a_model_field_override_extends_a_model_name(self):
        out = apply_overrides({"model": "generic"}, ["model.generic_bytes_per_token=70272"])
        assert out["model"] == {"name": "generic", "generic_bytes_per_token": 70272}

    def test_list_items_are_addressed_by_index(self):
        data = {"model": {"name": "m", "pools": [{"name": "kv", "bytes_per_page": 0}]}}
        assert (
            apply_overrides(data, ["model.pools.0.bytes_per_page=5"])["model"]["pools"][0]["bytes_per_page"]
            == 5
        )


class TestPathsAndDump:
    def test_relative_paths_resolve_against_the_scenario_file(self, tmp_path):
        (tmp_path / "traces").mkdir()
        trace = tmp_path / "traces" / "t.jsonl"
        trace.write_text("")
        sub = tmp_path / "scenarios"
        sub.mkdir()
        path = write(sub, "name: x\nworkload:\n  kind: trace\n  path: ../traces/t.jsonl\n")
        s = load_scenario(path)
        assert isinstance(s.workload, TraceWorkload) and s.workload.path == str(trace.resolve())

    def test_a_path_typed_in_a_set_is_the_current_folders_even_where_the_scenario_has_its_own(self, tmp_path,
                                                                                           monkeypatch):  # fmt: skip
        sub = tmp_path / "scenarios"
        sub.mkdir()
        for folder in (tmp_path, sub):
            (folder / "t.jsonl").write_text("")
        path = write(sub, "name: x\nworkload:\n  kind: trace\n  path: t.jsonl\n")
        monkeypatch.chdir(tmp_path)
        assert load_scenario(path).workload.path == str((sub / "t.jsonl").resolve())  # the file's: beside it
        typed = load_scenario(path, ["workload.path=t.jsonl"])
        assert typed.workload.path == str((tmp_path / "t.jsonl").resolve())  # the command line's: the CWD's

    def test_a_scenario_written_elsewhere_names_its_files_relative_to_itself(self, tmp_path, monkeypatch):
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "w.jsonl").write_text("")
        out = tmp_path / "runs" / "deep"
        out.mkdir(parents=True)
        doc = {"name": "x", "model": {"name": "m", "config": "org/model"},  # a Hugging Face id: kept
               "workload": {"kind": "trace", "path": "data/w.jsonl"}}
        rebased = rebase_paths(doc, tmp_path, out)
        assert rebased["workload"]["path"] == "../../data/w.jsonl" and rebased["model"]["config"] == "org/model"
        assert doc["workload"]["path"] == "data/w.jsonl"  # a copy
        (out / "s.yaml").write_text(yaml.safe_dump({**rebased, "model": "deepseek-v4-flash"}))
        monkeypatch.chdir(tmp_path / "runs")  # any folder
        assert load_scenario(out / "s.yaml").workload.path == str((tmp_path / "data" / "w.jsonl").resolve())

    def test_dump_resolved_round_trips_with_every_default_written(self, tmp_path):
        path = write(tmp_path, "name: x\nhicache:\n  write_policy: write_back\n")
        s = load_scenario(path, ["workload.kind=synthetic", "workload.num_requests=10"])
        text = dump_resolved(s)
        assert "prefetch_timeout_per_ki_token_s: 0.25" in text
        assert load_scenario(write(tmp_path, text, "again.yaml")) == s

    def test_validate_file_summarises(self):
        summary = validate_file(SCENARIOS / "quickstart.yaml")
        assert summary.splitlines()[0].endswith("ok (quickstart)")
        assert "64 clients x 3 rounds" in summary


class TestFieldPaths:
    def test_known_paths_are_listed(self):
        paths = field_paths(Scenario)
        assert {
            "hicache",
            "hicache.load_back_threshold",
            "workload.num_clients",
            "workload.path",
            "workload.rate",
        } <= paths
        assert {"hisparse.access.zipf_alpha", "model.pools.bytes_per_page", "l3.read_gbps", "model"} <= paths

    def test_unknown_paths_are_not(self):
        paths = field_paths(Scenario)
        assert (
            "hicache.foo" not in paths and "prefech_threshold" not in paths and "workload.kind.x" not in paths
        )


class TestSchemaHygiene:
    def test_every_field_has_help(self):
        models = [m for m in vars(sim.scenario.load).values() if isinstance(m, type) and issubclass(m, BaseModel)]
        missing = [
            f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description
        ]
        assert missing == []

    def test_all_lists_the_public_names_sorted(self):
        assert sim.scenario.load.__all__ == sorted(sim.scenario.load.__all__)
        assert all(hasattr(sim.scenario.load, name) for name in sim.scenario.load.__all__)


class TestModelConfigAndGpu:
    BASE = {"name": "t", "model": {"name": "qwen", "config": "qwen3-14b"},
            "hardware": {"gpu": "A10", "tp_size": 2}, "hicache": {"page_size": 64}}  # fmt: skip

    def test_the_gpu_fills_its_datasheet_figures_and_sglangs_chunk(self):
        s = scenario_from_dict(self.BASE)
        assert s.hardware.gpu_name == "A10" and s.hardware.hbm_bandwidth_tbps == 0.6
        assert s.hardware.peak_tflops == 125.0 and s.scheduler.chunked_prefill_size == 4096

    def test_kv_memory_follows_as_sglang_sizes_it(self):
        from sim.model.hardware import default_mem_fraction_static, get_gpu, kv_budget_bytes

        s = scenario_from_dict(self.BASE)
        mfs = default_mem_fraction_static(get_gpu("A10"), tp_size=2, chunked_prefill_size=4096)
        weights = s.model.shape(2).weight_bytes_per_rank
        assert s.hardware.kv_mem_gb == pytest.approx(kv_budget_bytes(get_gpu("A10"), mfs, weights) / 1e9, abs=1e-3)
        given = scenario_from_dict({**self.BASE, "hardware": {**self.BASE["hardware"], "mem_fraction_static": 0.85}})
        assert given.hardware.kv_mem_gb > s.hardware.kv_mem_gb

    def test_an_explicit_kv_mem_gb_stays_an_override(self):
        s = scenario_from_dict({**self.BASE, "hardware": {**self.BASE["hardware"], "kv_mem_gb": 3.0}})
        assert s.hardware.kv_mem_gb == 3.0

    def test_the_compute_model_follows_from_the_config(self):
        s = scenario_from_dict(self.BASE)
        shape = s.model.shape(2)
        assert s.compute.prefill_flops_per_token == pytest.approx(shape.flops_per_token)
        assert s.compute.kv_bytes_per_token_read == 81_920 and s.compute.n_experts == 0

    def test_the_model_spec_is_per_rank(self):
        spec = build_model_spec(scenario_from_dict(self.BASE))
        assert spec.bytes_per_page == 81_920 * 64

    def test_weights_too_big_for_the_gpu_are_the_configs_error_not_a_derived_fields(self):
        data = {**self.BASE, "model": {"name": "v3", "config": "deepseek-v3"}, "hardware": {"gpu": "A10"}}
        assert "model.config: deepseek-v3: the weights (672.9 GB per rank at tp_size 1) leave no KV memory" \
            in error_of(scenario_from_dict, data)  # fmt: skip

    def test_unknown_gpu_and_config_are_field_errors(self):
        assert "hardware.gpu" in error_of(scenario_from_dict, {**self.BASE, "hardware": {"gpu": "Z9"}})
        bad = {**self.BASE, "model": {"name": "x", "config": "nope.json"}}
        assert "model.config" in error_of(scenario_from_dict, bad)

    def test_a_resolved_dump_loads_back_equal(self):
        s = scenario_from_dict(self.BASE)
        assert scenario_from_dict(yaml.safe_load(dump_resolved(s))) == s


class TestBenchServingWorkload:
    def test_steps_validate_with_bench_servings_defaults(self):
        s = scenario_from_dict({"name": "t", "workload": {"kind": "bench_serving", "steps": [{"num_prompts": 4}]}})
        step = s.workload.steps[0]
        assert (step.random_input_len, step.random_output_len, step.random_range_ratio) == (1024, 1024, 0.0)
        assert step.request_rate is None and step.max_concurrency is None and step.seed == 42

    def test_at_least_one_step(self):
        assert "workload.steps" in error_of(scenario_from_dict, {"name": "t", "workload": {"kind": "bench_serving", "steps": []}})


class TestDerivedFieldsFollowTheirSources:
    """A dump leaves derived fields out, so a sweep or --set over its sources derives them afresh."""

    BASE = TestModelConfigAndGpu.BASE

    def test_a_dump_omits_what_was_derived_and_keeps_what_was_given(self):
        s = scenario_from_dict({**self.BASE, "scheduler": {"chunked_prefill_size": 2048}})
        assert "hardware.kv_mem_gb" in s.derived and "scheduler.chunked_prefill_size" not in s.derived
        dumped = s.model_dump(mode="json")
        assert "kv_mem_gb" not in dumped["hardware"] and dumped["scheduler"]["chunked_prefill_size"] == 2048

    @pytest.mark.parametrize("override", ["hardware.mem_fraction_static=0.8", "hardware.gpu=H100", "hardware.tp_size=4"])
    def test_changing_a_source_on_a_dump_changes_what_follows(self, override):
        s = scenario_from_dict(self.BASE)
        again = scenario_from_dict(apply_overrides(s.model_dump(mode="json"), [override]))
        assert again.hardware.kv_mem_gb != s.hardware.kv_mem_gb

    def test_a_given_kv_mem_gb_survives_a_dump_and_an_override(self):
        s = scenario_from_dict({**self.BASE, "hardware": {**self.BASE["hardware"], "kv_mem_gb": 3.0}})
        again = scenario_from_dict(apply_overrides(s.model_dump(mode="json"), ["hardware.mem_fraction_static=0.8"]))
        assert again.hardware.kv_mem_gb == 3.0


class TestTwoBatchOverlapIsRefusedWhereSGLangRefusesIt:
    """scheduler.enable_two_batch_overlap: DP attention without an EP all-to-all backend
    (arg_groups/validation_hook.py:756-772), not V4.1 (deepseek_v4_hook.py:345-354), no V4 mixed pass
    (batch_overlap/operations_strategy.py:172-183); other models are not modelled."""

    DP = "hardware:\n  gpu: B200\n  tp_size: 8\n  dp_size: 8\n  enable_dp_attention: true\n"

    @pytest.mark.parametrize(("body", "expected"), [
        ("model: deepseek-v4-flash\nhardware:\n  gpu: B200\n  tp_size: 8\n", "needs DP attention"),
        ("model: deepseek-v4.1-flash\n" + DP, "SGLang refuses two-batch overlap for DeepSeek-V4.1"),
        ("model:\n  name: Qwen/Qwen3-30B-A3B\n" + DP, "modelled for DeepSeek-V4 only"),
        ("model: deepseek-v4-flash\n" + DP + "scheduler:\n  enable_mixed_chunk: true\n", "mixed-chunk pass"),
    ])  # fmt: skip
    def test_refusals_name_the_field(self, tmp_path, body, expected):
        text = "name: x\n" + body.replace("scheduler:\n", "scheduler:\n  enable_two_batch_overlap: true\n")
        if "scheduler:" not in body:
            text += "scheduler:\n  enable_two_batch_overlap: true\n"
        message = error_of(load_scenario, write(tmp_path, text))
        assert "scheduler.enable_two_batch_overlap: " in message and expected in message

    def test_the_threshold_is_bounded_as_sglang_asserts_it(self, tmp_path):
        body = "name: x\nscheduler:\n  tbo_token_distribution_threshold: 0.6\n"
        assert "scheduler.tbo_token_distribution_threshold: must be <= 0.5" in error_of(load_scenario, write(tmp_path, body))

    def test_the_dp_scenario_takes_it(self):
        sc = load_scenario(SCENARIOS / "dsv4_flash_dp_mtp.yaml", ["scheduler.enable_two_batch_overlap=true"])
        assert sc.scheduler.enable_two_batch_overlap and sc.scheduler.tbo_token_distribution_threshold == 0.48
