"""scenario from-sglang: DP attention, EP, speculative decoding and FP4 flags as users type them."""

from __future__ import annotations

import pytest

from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang
from sim.scenario.load import scenario_from_dict

V4 = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 "


def convert(flags: str, gpu: str = "B200", **kw):
    return scenario_from_dict(from_sglang(V4 + flags, gpu=gpu, **kw).scenario)


class TestDP:
    def test_dp_size_with_dp_attention_is_attention_dp_ranks(self):
        hw = convert("--dp-size 8 --enable-dp-attention").hardware
        assert (hw.dp_size, hw.enable_dp_attention, hw.attn_dp_size) == (8, True, 8)

    def test_the_short_spellings_and_flag_order_do_not_matter(self):
        hw = convert("--enable-dp-attention --dp 4").hardware
        assert (hw.dp_size, hw.enable_dp_attention) == (4, True)

    def test_attn_dp_size_is_the_0_5_23_spelling(self):
        assert convert("--attn-dp-size 4").hardware.attn_dp_size == 4

    def test_dp_size_alone_is_replicas(self):
        sc = convert("--dp-size 2")
        assert sc.cluster.instances == 2 and sc.hardware.attn_dp_size == 1

    def test_ep_size_and_the_load_balance_method_map(self):
        sc = convert("--dp 8 --enable-dp-attention --ep-size 8 --load-balance-method total_requests")
        assert sc.hardware.ep_size == 8 and sc.scheduler.load_balance_method == "total_requests"

    def test_auto_load_balancing_runs_round_robin(self):
        from sim.scenario.resolve import resolve

        sc = convert("--dp 8 --enable-dp-attention --load-balance-method auto")
        assert sc.scheduler.load_balance_method == "auto"
        assert resolve(sc).engine.load_balance_method == "round_robin"

    def test_the_moe_all_to_all_backend_maps_and_its_resident_weights_leave_less_kv(self):
        dep = "--dp 8 --enable-dp-attention --quantization mxfp4"  # FP4 experts, what MegaMoE rebuilds
        plain, deepep, mega = (convert(dep + a2a).hardware for a2a in ("", " --moe-a2a-backend deepep",
                                                                        " --moe-a2a-backend megamoe"))
        assert (deepep.moe_a2a_backend, mega.moe_a2a_backend) == ("deepep", "megamoe")
        assert plain.kv_mem_gb > deepep.kv_mem_gb > mega.kv_mem_gb

    def test_the_deprecated_deepep_flag_is_the_deepep_backend(self):
        assert convert("--dp 8 --enable-dp-attention --enable-deepep-moe").hardware.moe_a2a_backend == "deepep"


class TestSpeculative:
    def test_the_mtp_flags_map_with_the_runs_accept_length(self):
        sc = convert("--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
                     "--speculative-num-draft-tokens 4 --max-running-requests 128", accept_length=2.4)  # fmt: skip
        s = sc.speculative
        assert (s.algorithm, s.num_steps, s.eagle_topk, s.draft_tokens, s.accept_length) == ("NEXTN", 3, 1, 4, 2.4)
        assert sc.scheduler.max_running_requests == 128

    def test_sglang_caps_running_requests_at_48_when_none_is_given(self):
        assert convert("--speculative-algorithm EAGLE", accept_length=3).scheduler.max_running_requests == 48

    def test_the_accept_length_is_required(self):
        with pytest.raises(InputError, match="--accept-length"):
            from_sglang(V4 + "--speculative-algorithm EAGLE", gpu="B200")

    def test_a_launch_that_forces_the_accept_length_needs_no_accept_length_flag(self):
        conv = from_sglang("SGLANG_SIMULATE_ACC_LEN=2.49 " + V4 + "--speculative-algorithm EAGLE", gpu="B200")
        assert scenario_from_dict(conv.scenario).speculative.accept_length == 2.49
        assert conv.origins["speculative.accept_length"] == "SGLANG_SIMULATE_ACC_LEN=2.49"

    def test_a_forced_accept_length_is_at_most_the_draft_chain_and_the_flag_must_agree(self):
        launch = "SGLANG_SIMULATE_ACC_LEN=6 " + V4 + "--speculative-algorithm EAGLE --speculative-num-steps 2"
        assert scenario_from_dict(from_sglang(launch, gpu="B200").scenario).speculative.accept_length == 3
        assert scenario_from_dict(from_sglang(launch, gpu="B200", accept_length=3).scenario).speculative.accept_length == 3
        with pytest.raises(InputError, match=r"--accept-length 2\.5: the launch forces 3 .*SGLANG_SIMULATE_ACC_LEN=6"):
            from_sglang(launch, gpu="B200", accept_length=2.5)

    def test_a_forced_accept_length_that_is_off_or_without_drafts_is_listed_and_a_bad_one_refused(self):
        off = from_sglang("SGLANG_SIMULATE_ACC_LEN=-1 " + V4 + "--speculative-algorithm EAGLE", gpu="B200",
                          accept_length=2.0)  # fmt: skip
        assert scenario_from_dict(off.scenario).speculative.accept_length == 2.0
        assert any(line.startswith("SGLANG_SIMULATE_ACC_LEN=-1: off") for line in off.ignored)
        plain = from_sglang("SGLANG_SIMULATE_ACC_LEN=2.49 " + V4, gpu="B200")
        assert any("runs no speculative decoding" in line for line in plain.ignored)
        with pytest.raises(InputError, match="^--launch: SGLANG_SIMULATE_ACC_LEN: 'fast' is not a number"):
            from_sglang("SGLANG_SIMULATE_ACC_LEN=fast " + V4 + "--speculative-algorithm EAGLE", gpu="B200")

    def test_an_algorithm_not_modelled_is_refused(self):
        with pytest.raises(InputError, match="--speculative-algorithm NGRAM: not modelled"):
            from_sglang(V4 + "--speculative-algorithm NGRAM", gpu="B200", accept_length=2)


class TestFp4:
    def test_the_fp4_indexer_flag_maps(self):
        assert convert("--enable-deepseek-v4-fp4-indexer").model.fp4_indexer

    def test_mxfp4_quantization_sets_the_expert_dtype(self):
        assert convert("--quantization mxfp4").model.expert_dtype == "fp4"

    def test_fp4_experts_leave_more_kv_memory(self):
        assert convert("--quantization mxfp4").hardware.kv_mem_gb > convert("").hardware.kv_mem_gb


class TestMegaMoeHost:
    """InferenceX #2718's launch (DEP8, MegaMoE, ratio 8): its host pools follow the KV that SGLang sizes after
    MegaMoE's weights are built, and that is what lets ratio 8 start on a 2 TB node."""

    PRO = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention "
           "--ep-size 8 --enable-deepseek-v4-fp4-indexer --mem-fraction-static 0.9 --swa-full-tokens-ratio 0.02 "
           "--enable-hierarchical-cache --hicache-ratio 8")  # fmt: skip

    def test_the_published_ratio_starts_with_megamoe_and_not_without(self):
        sc = scenario_from_dict(from_sglang(self.PRO + " --moe-a2a-backend megamoe", gpu="B200").scenario)
        assert sc.hardware.kv_mem_gb < 30
        with pytest.raises(InputError, match="hicache.hicache_ratio: host pools"):
            scenario_from_dict(from_sglang(self.PRO, gpu="B200").scenario)
