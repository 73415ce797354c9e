"""Speculative decoding: a verify pass emits accept_length tokens, costs a draft + verify, and holds draft KV.

SGLang 0.5.23: speculative/eagle_worker_v2.py (draft, verify, draft extend), mem_cache/allocation_sizing.py
(per-step KV reserve), model_executor/pool_configurator.py:1250-1257 (the draft's KV share of the pools).
"""

import pytest

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.model.compute import Roofline
from sim.model.speculative import SpecDecode
from sim.scenario.load import build_model_spec, scenario_from_dict
from sim.scenario.resolve import device_pools


def one_request(model: str = "deepseek-v4-flash", output_length: int = 31, **spec):
    """One 512-token prompt decoding ``output_length`` tokens alone, L1 only."""
    data = {
        "name": "spec", "model": model, "hardware": {"kv_mem_gb": 2.0}, "hicache": {"enabled": False},
        "workload": {"kind": "synthetic", "num_requests": 1, "input_length": 512, "output_length": output_length},
    }  # fmt: skip
    if model == "generic":
        data["model"] = {"name": "generic", "generic_bytes_per_token": 35136}
        data["hicache"]["page_size"] = 1
    if spec:
        data["speculative"] = spec
    return scenario_from_dict(data, source="test")


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "generic"])
class TestTokensPerPass:
    def test_accept_length_3_emits_3_tokens_per_verify_pass(self, model):
        # the prefill makes the first token; 30 more at 3 a pass is 10 decode passes (30 without speculation)
        plain = run_scenario(one_request(model)).summary["engine"]["steps"]
        spec = run_scenario(one_request(model, algorithm="EAGLE", accept_length=3)).summary["engine"]["steps"]
        assert plain == 1 + 30
        assert spec == 1 + 10

    def test_a_fractional_accept_length_rounds_up_the_last_pass(self, model):
        # 30 tokens at 2.4 a pass: floor(12 x 2.4) = 28 < 30 <= floor(13 x 2.4) = 31, so 13 passes
        s = run_scenario(one_request(model, algorithm="NEXTN", accept_length=2.4)).summary
        assert s["engine"]["steps"] == 1 + 13
        assert s["requests"]["finished"] == 1


class TestPassCost:
    roofline = Roofline(2.6e10, 1.4e6, 1.3e10, 3900.0, 989e12, 4.8e12, 0.4, 0.7, 2e-3,
                        expert_bytes=4e7, n_experts=256, experts_per_token=6)  # fmt: skip
    spec = SpecDecode(num_steps=3, topk=1, draft_tokens=4, accept_length=3.0, draft_share=1 / 43)

    def test_a_verify_pass_costs_more_than_a_plain_decode_pass_and_less_than_three(self):
        plain = self.roofline.step_seconds(0, 0.0, 64, 64 * 4096)
        spec = self.spec.decode_seconds(self.roofline, 64, 64 * 4096)
        assert plain < spec < 3 * plain

    def test_the_draft_share_prices_the_draft_forwards(self):
        no_draft = SpecDecode(3, 1, 4, 3.0, draft_share=0.0).decode_seconds(self.roofline, 64, 64 * 4096)
        assert self.spec.decode_seconds(self.roofline, 64, 64 * 4096) > no_draft

    def test_a_backend_that_prices_speculation_itself_gets_the_plain_decode_shape(self):
        # aiconfigurator-core's estimator prices the draft and verify of a step (its nextn) itself
        class Backend:
            prices_speculative = True
            overhead_s = 0.0

            def __init__(self):
                self.calls = []

            def step_seconds(self, *shape):
                self.calls.append(shape)
                return 1.0

        backend = Backend()
        assert self.spec.decode_seconds(backend, 8, 8 * 4096) == 1.0
        assert backend.calls == [(0, 0.0, 8, 8 * 4096)]

    def test_a_spec_run_decodes_faster_when_tokens_per_pass_beat_the_pass_cost(self):
        plain = run_scenario(one_request(output_length=301)).summary["e2e_s"]["mean"]
        spec = run_scenario(one_request(output_length=301, algorithm="EAGLE", accept_length=3)).summary["e2e_s"]["mean"]
        assert spec < plain


class TestKV:
    def test_the_draft_layer_takes_its_share_of_the_pools(self):
        # V4-Flash has 43 layers; the NEXTN head adds one: each pool token costs 44 / 43 of its bytes
        plain, spec = one_request(), one_request(algorithm="EAGLE", accept_length=3)
        l1_plain, _ = device_pools(plain, build_model_spec(plain))
        l1_spec, _ = device_pools(spec, build_model_spec(spec))
        assert l1_spec == pytest.approx(l1_plain * 43 / 44, abs=1)
        assert l1_spec < l1_plain

    def test_each_decode_step_reserves_twice_the_draft_width(self):
        # allocation_sizing.py:29-70: 2 x max(num_steps x topk, num_draft_tokens)
        assert SpecDecode(3, 1, 4, 2.0, 0.0).reserve == 8
        assert SpecDecode(5, 4, 8, 2.0, 0.0).reserve == 40  # page 1: max(20, 8)
        # page > 1 with topk > 1: whole pages per branch, ceil((255 + 5) / 256) = 2 pages x 4 branches
        assert SpecDecode(5, 4, 8, 2.0, 0.0, page_size=256).reserve == 2 * 2 * 256 * 4


class TestScenario:
    def test_accept_length_is_required_with_an_algorithm(self):
        with pytest.raises(InputError, match="speculative.accept_length: required"):
            one_request(algorithm="EAGLE")

    def test_accept_length_cannot_exceed_num_steps_plus_one(self):
        with pytest.raises(InputError, match="speculative.accept_length"):
            one_request(algorithm="EAGLE", num_steps=2, accept_length=3.5)

    def test_topk_1_needs_num_steps_plus_one_draft_tokens(self):
        with pytest.raises(InputError, match="speculative.num_draft_tokens"):
            one_request(algorithm="EAGLE", num_steps=3, num_draft_tokens=6, accept_length=2)


def test_the_v4_cache_holds_the_draft_slots_past_the_new_token():
    # a 250-token prompt: its first decode step writes row 250; with 8 draft slots reserved it holds rows up to
    # 258, so it takes its second page now rather than six steps later (eagle_utils.py:857-870)
    from sim.cache.v4.hicache import V4HiCache
    from sim.model.pools import get_model

    def pages_after_one_step(lookahead: int) -> int:
        cache = V4HiCache(get_model("deepseek-v4-flash"), l1_pages=64, l2_pages=0, policy="write_through",
                          load_back_threshold=10, page_tokens=256, swa_full_tokens_ratio=0.5,
                          chunked_prefill_size=8192, decode_lookahead=lookahead)  # fmt: skip
        adm = cache.admit_request([("p", 0), ("p", 1)], 250, 20)
        cache.extend(adm, 250)
        cache.decode(adm, 1)
        return -(-adm.run.allocated // 256)

    assert pages_after_one_step(0) == 1
    assert pages_after_one_step(SpecDecode(3, 1, 4, 3.0, 0.0).reserve) == 2
