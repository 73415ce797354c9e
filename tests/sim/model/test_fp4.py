"""FP4 experts and the FP4 indexer: weight bytes per rank, KV capacity, indexer bytes and HiSparse's batch.

SGLang 0.5.23: MXFP4 experts (layers/quantization/fp8.py:1603-1716, configs/model_config.py:722-733), the
indexer's bytes per compressed token (mem_cache/deepseek_v4_memory_pool.py:53-57) and how the pools are sized
with it (model_executor/pool_configurator.py:1109-1114: fp4 bytes on ROCm, the fp8 estimate on NVIDIA).
"""

import pytest

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.hisparse.buffer import HbmBudget, decode_capacity
from sim.hisparse.decode import decode_shape
from sim.model.modelcfg import derive, expert_dtype_of, load_config
from sim.scenario.load import build_model_spec, scenario_from_dict
from sim.scenario.resolve import device_pools


def v4_flash(gpu: str = "B200", **model):
    return scenario_from_dict({
        "name": "fp4", "model": {"name": "v4f", "config": "deepseek-v4-flash", **model},
        "hardware": {"gpu": gpu, "tp_size": 8}, "hicache": {"enabled": False},
    }, source="test")  # fmt: skip


def l1_pages(sc) -> int:
    return device_pools(sc, build_model_spec(sc))[0]


class TestFp4Experts:
    def test_fp4_experts_take_about_half_the_bytes_of_fp8(self):
        cfg, _ = load_config("deepseek-v4-flash")
        fp8, fp4 = derive(cfg, tp_size=8, expert_dtype="fp8"), derive(cfg, tp_size=8, expert_dtype="fp4")
        assert fp4.expert_bytes / fp8.expert_bytes == pytest.approx(0.5 + 1 / 32)
        assert fp4.dense_weight_bytes == fp8.dense_weight_bytes  # attention, shared experts, embeddings: as before
        assert fp4.weight_bytes_per_rank < fp8.weight_bytes_per_rank

    def test_fp4_weights_free_kv_capacity_on_the_same_gpu(self):
        fp8, fp4 = v4_flash(expert_dtype="fp8"), v4_flash(expert_dtype="fp4")
        assert fp4.hardware.kv_mem_gb > fp8.hardware.kv_mem_gb
        assert l1_pages(fp4) > l1_pages(fp8)
        # what the experts no longer hold is what the pools gain
        freed = derive(load_config("deepseek-v4-flash")[0], tp_size=8, expert_dtype="fp8").weight_bytes_per_rank - \
            derive(load_config("deepseek-v4-flash")[0], tp_size=8, expert_dtype="fp4").weight_bytes_per_rank
        assert (fp4.hardware.kv_mem_gb - fp8.hardware.kv_mem_gb) * 1e9 == pytest.approx(freed, rel=1e-3)

    def test_a_decode_step_reads_fewer_expert_bytes(self):
        assert v4_flash(expert_dtype="fp4").compute.expert_bytes < v4_flash(expert_dtype="fp8").compute.expert_bytes

    def test_auto_follows_the_checkpoints_routed_expert_quant_method(self):
        assert expert_dtype_of({"quantization_config": {"quant_method": "fp8"}}) == "fp8"
        assert expert_dtype_of({"quantization_config": {"quant_method": "fp8",
                                                        "routed_experts_quant_method": "mxfp4"}}) == "fp4"  # fmt: skip
        assert expert_dtype_of({}) == "bf16"


class TestFp4Indexer:
    def test_the_c4_indexer_pool_holds_68_bytes_per_compressed_token(self):
        # 21 C4 layers x 64 compressed tokens per 256-token page
        assert build_model_spec(v4_flash(fp4_indexer=True)).pool("c4_indexer").bytes_per_page == 21 * 64 * 68
        assert build_model_spec(v4_flash()).pool("c4_indexer").bytes_per_page == 21 * 64 * 132

    def test_decode_reads_fewer_indexer_bytes_per_token(self):
        assert v4_flash(fp4_indexer=True).compute.kv_bytes_per_token_read < v4_flash().compute.kv_bytes_per_token_read

    def test_on_nvidia_the_pools_are_sized_as_with_the_fp8_indexer(self):
        assert l1_pages(v4_flash("B200", fp4_indexer=True)) == l1_pages(v4_flash("B200"))

    def test_on_rocm_the_smaller_indexer_frees_pool_tokens(self):
        assert l1_pages(v4_flash("MI355X", fp4_indexer=True)) > l1_pages(v4_flash("MI355X"))

    def test_sglang_refuses_it_below_sm100(self):
        with pytest.raises(InputError, match="model.fp4_indexer: SGLang refuses it on H200"):
            v4_flash("H200", fp4_indexer=True)

    def test_hisparse_batch_gain_grows_where_the_pools_are_sized_at_fp4(self):
        def capacity(fp4: bool, sized: bool):
            shape = decode_shape("deepseek-v4-flash", 20e9, fp4, sized)
            return decode_capacity(shape, HbmBudget(), 200_000, 4096, max_running_requests=1024)

        fp8, nvidia, rocm = capacity(False, False), capacity(True, False), capacity(True, True)
        assert nvidia.max_batch_hisparse == fp8.max_batch_hisparse  # same pools ...
        assert nvidia.step_seconds_baseline < fp8.step_seconds_baseline  # ... but fewer bytes read a step
        assert rocm.max_batch_hisparse > fp8.max_batch_hisparse
        assert rocm.batch_gain > fp8.batch_gain


def test_a_hisparse_decode_step_reads_the_touched_experts_at_their_dtype():
    def busy(expert_dtype: str) -> float:
        sc = scenario_from_dict({
            "name": "d", "model": {"name": "deepseek-v4-flash", "config": "deepseek-v4-flash",
                                   "expert_dtype": expert_dtype},
            "hardware": {"kv_mem_gb": 8, "tp_size": 8}, "hicache": {"swa_full_tokens_ratio": 0.02},
            "cluster": {"role": "decode"}, "scheduler": {"max_running_requests": 16},
            "hisparse": {"enabled": True, "device_buffer_size": 2048, "host_to_device_ratio": 8, "step_windows": 1,
                         "window_steps": 64},
            "workload": {"kind": "synthetic", "rate": 100.0, "num_requests": 16, "input_length": 16384,
                         "output_length": 128},
        }, source="test")  # fmt: skip
        s = run_scenario(sc).summary
        return s["engine"]["busy_s"] / s["engine"]["steps"]

    assert busy("fp4") < busy("fp8")


def test_an_expert_dtype_without_a_config_is_refused():
    with pytest.raises(InputError, match="model.expert_dtype: needs model.config"):
        scenario_from_dict({"name": "x", "model": {"name": "deepseek-v4-flash", "expert_dtype": "fp4"}}, source="t")
