"""Which DSA layers run HiSparse's swap-in kernel (IndexShare anchors) and which replay a plan; the DSA family of
the coordinator as the pricing side drives it (raw positions, every-step backups, growth)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.base.errors import InputError
from sim.hisparse.coordinator import DSA, V4, HiSparseRequest, buffer_slots, eager_backups, run_stream
from sim.hisparse.hot import LruBuffer
from sim.hisparse.indexshare import INDEX_SHARE_FIELDS, SwapInPlan, shared_index_layers, skips_topk
from sim.hisparse.topk import ParametricAccess


@pytest.mark.parametrize("share, n, anchors", [
    ({"index_topk_freq": 4, "index_skip_topk_offset": 3}, 8, (0, 1, 2, 2, 2, 2, 6, 6)),  # GLM-5.2 style
    ({"index_topk_freq": 2}, 5, (0, 1, 1, 3, 3)),  # no offset: max(layer - 1, 0) % freq
    ({"cli_factor": 3}, 7, (0, 0, 0, 3, 3, 3, 6)),  # LongCat: fresh every cli_factor layers
    ({"index_topk_pattern": "DDSDS"}, 5, (0, 1, 1, 3, 3)),
    ({"indexer_types": ["full", "shared", "full", "shared", "shared"]}, 5, (0, 0, 2, 2, 2)),
    ({}, 3, (0, 1, 2)),
    ({"index_topk_freq": 1}, 4, (0, 1, 2, 3)),  # nothing skips: every layer runs the kernel
])  # fmt: skip
def test_the_plan_follows_sglangs_skip_pattern(share, n, anchors):
    """``dsa_layer_skips_topk`` (configs/model_config.py:488-522), then ``_build_prefetch_groups``: each skip
    layer replays the nearest kernel layer before it."""
    plan = SwapInPlan.from_index_share(share, n)
    assert plan.anchor_of == anchors
    assert plan.kernel_layers == tuple(sorted(set(anchors)))
    assert len(plan.kernel_layers) + len(plan.skip_layers) == n


def test_the_coordinator_reads_cli_factor_before_indexer_types_where_the_model_config_reads_them_the_other_way():
    """``resolve_shared_index_layers`` tests ``cli_factor > 1`` first (hisparse_coordinator.py:93-96); the model's own
    ``dsa_layer_skips_topk`` tests ``indexer_types`` first. The coordinator's order decides the plan."""
    share = {"cli_factor": 2, "indexer_types": ["full", "full", "full", "shared"]}
    assert shared_index_layers(share, 4) == [False, True, False, True]
    assert [skips_topk(share, i) for i in range(4)] == [False, False, False, True]


def test_no_skip_layer_means_no_plan_and_a_first_skip_layer_is_refused():
    assert shared_index_layers({"index_topk_freq": 1}, 6) is None
    with pytest.raises(InputError, match="layer 0 reuses the top-k of a layer before it"):
        SwapInPlan.from_index_share({"indexer_types": ["shared", "full"]}, 2)


def test_pricing_runs_the_plans_kernel_layers_synchronously_and_copies_on_its_skip_layers():
    """GLM-5.2's bundled config: the plan the coordinator builds from its IndexShare fields has as many kernel and
    skip layers as the layout pricing reads (``swap_in_step_seconds``): one synchronous swap-in a kernel layer,
    one copy of its anchor's misses a skip layer, hidden up to a layer's compute (:1571-1637)."""
    from sim.hisparse.dsa import swap_in_step_seconds
    from sim.model.costs import default_cost_table
    from sim.model.dsa import dsa_layout
    from sim.model.modelcfg import load_config

    cfg = load_config("glm-5.2-fp8")[0]
    plan = SwapInPlan.from_index_share({k: cfg[k] for k in INDEX_SHARE_FIELDS if cfg.get(k) is not None},
                                       cfg["num_hidden_layers"])  # fmt: skip
    lay = dsa_layout(cfg, "bfloat16")
    assert (len(plan.kernel_layers), len(plan.skip_layers)) == (lay.anchors, lay.skip_layers) == (21, 57)
    costs = default_cost_table()
    swap = costs.swap_in_seconds(16, lay.index_topk, 900, lay.kv_row_bytes)
    copy = costs.transfer_seconds("h2d", "kernel", 900, lay.kv_row_bytes)
    assert swap_in_step_seconds(lay, costs, 16, 900, 0.0) == pytest.approx(len(plan.kernel_layers) * swap
                                                                           + len(plan.skip_layers) * copy)
    assert swap_in_step_seconds(lay, costs, 16, 900, copy) == pytest.approx(len(plan.kernel_layers) * swap)


def test_dsa_backs_up_every_step_after_the_first_where_v4_backs_up_one_in_four():
    assert eager_backups(100, 10, ratio=DSA.ratio) == 9
    assert eager_backups(100, 10) == 2  # V4: seq_len - 1 in 101..109 that are multiples of 4 (104, 108)


def test_a_dsa_buffer_holds_whole_pages_and_then_its_size_plus_a_page():
    assert [buffer_slots(n, 256, 64) for n in (1, 64, 65, 192, 193, 256, 1000)] == [64, 64, 128, 192, 320, 320, 320]
    req = HiSparseRequest([LruBuffer(256, 0)], 100, "direct", DSA, 64)
    caps = []
    for n in range(101, 300):
        req.step(n, [np.empty(0, dtype=np.int64)], 0)
        caps.append(req.buffer_cap)
    assert caps[0] == 128 and caps[128 - 101 + 1] == 192 and caps[-1] == 320 and caps == sorted(caps)
    assert HiSparseRequest([LruBuffer(256, 0)], 100, "direct", V4, 64).buffer_cap == 320  # V4: padded at admission


def test_run_stream_drives_a_dsa_layer_on_raw_positions():
    """The pricing side's entry: a DSA stream from the parametric indexer with ``ratio=1`` (raw positions)
    through a hot buffer: fast (no misses) while seq_len <= the buffer, misses once past it; V4 on the same
    lengths would stay on the fast path (its kernel length is a quarter)."""
    rng = np.random.default_rng(0)
    stream = ParametricAccess(ratio=1).stream(0, 0, 500, 40, 64, rng)
    assert int(stream.ids.max()) >= 500 // 4  # raw positions, not compressed ids
    dsa = run_stream(stream, 256, family=DSA)
    assert dsa.misses.sum() > 0 and dsa.backups == 39
    fits = run_stream(ParametricAccess(ratio=1).stream(0, 0, 100, 40, 64, rng), 256, family=DSA)
    assert fits.misses.sum() == 0


def test_simulate_hisparse_runs_the_dsa_family_on_raw_positions_with_a_backup_every_step():
    from sim.hisparse.buffer import DecodeModelShape, HiSparseConfig, simulate_hisparse

    def run(family, ratio):
        cfg = HiSparseConfig(device_buffer_size=256, top_k=64, layers_simulated=1, family=family)
        return simulate_hisparse(cfg, DecodeModelShape(), ParametricAccess(ratio=ratio), 2, 600, 40, None,
                                 np.random.default_rng(1))  # fmt: skip

    dsa, v4 = run(DSA, 1), run(V4, 4)
    assert dsa.total_misses > 0 and v4.total_misses == 0  # V4's 150 compressed tokens fit 256 slots; 600 raw do not
    assert dsa.d2h_backup_bytes == 2 * 39 * DecodeModelShape().n_c4_layers * DecodeModelShape().kv_row_bytes
