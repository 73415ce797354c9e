"""DSA models (DeepSeek V3.2, GLM-5.x) as SGLang 0.5.23 stores them: the latent row by KV dtype, the indexer row,
IndexShare's anchor layers, and the bytes a pool token costs with HiSparse off and on."""

import pytest

from sim.base.errors import InputError
from sim.model.dsa import dsa_layout, is_dsa, kv_row_bytes, skips_topk
from sim.model.modelcfg import derive, load_config


@pytest.fixture(scope="module")
def configs():
    return {name: load_config(name)[0] for name in ("deepseek-v3.2", "glm-5.1-fp8", "glm-5.2-fp8", "deepseek-v3")}


def test_the_bundled_dsa_configs_are_dsa_and_v3_is_not(configs):
    assert is_dsa(configs["deepseek-v3.2"]) and is_dsa(configs["glm-5.1-fp8"]) and is_dsa(configs["glm-5.2-fp8"])
    assert not is_dsa(configs["deepseek-v3"])  # DeepseekV3ForCausalLM without index_topk: plain MLA


def test_a_hugging_face_id_names_the_bundled_config_without_aiconfigurator(configs, monkeypatch):
    import sim.model.aic as aic

    monkeypatch.setattr(aic, "model_config_path", lambda ref: None)  # as without the aic extra
    cfg, name = load_config("zai-org/GLM-5.1-FP8")
    assert cfg == configs["glm-5.1-fp8"] and name == "glm-5.1-fp8"


def test_the_latent_row_follows_the_kv_dtype_and_layout(configs):
    cfg = configs["glm-5.1-fp8"]
    lora, rope = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    assert kv_row_bytes(cfg, "bfloat16") == 2 * (lora + rope) == 1152
    assert kv_row_bytes(cfg, "fp8_e4m3") == lora + lora // 128 * 4 + 2 * rope == 656  # scaled, rope in bf16
    assert kv_row_bytes(cfg, "fp8_e4m3", raw_fp8=True) == lora + rope  # trtllm / TileLang
    with pytest.raises(InputError, match="bf16 or fp8_e4m3"):
        kv_row_bytes(cfg, "fp4_e2m1")


def test_indexshare_anchors_are_the_full_indexer_layers(configs):
    glm52 = configs["glm-5.2-fp8"]
    full = [i for i, t in enumerate(glm52["indexer_types"]) if t == "full"]
    assert [i for i in range(78) if not skips_topk(glm52, i)] == full
    assert dsa_layout(glm52).anchors == len(full) < 78
    assert dsa_layout(configs["glm-5.1-fp8"]).anchors == 78 and dsa_layout(configs["deepseek-v3.2"]).anchors == 61


def test_index_topk_freq_with_an_offset_marks_the_shared_layers():
    cfg = {"index_topk_freq": 4, "index_skip_topk_offset": 3}
    assert [i for i in range(12) if not skips_topk(cfg, i)] == [0, 1, 2, 6, 10]


def test_hisparse_sizes_every_layers_indexer_times_the_ratio_and_the_baseline_elides_shared_ones(configs):
    lay = dsa_layout(configs["glm-5.2-fp8"], "fp8_e4m3")
    assert lay.indexer_row_bytes == 128 + 4
    assert lay.bytes_per_token() == 78 * 656 + lay.anchors * 132
    assert lay.bytes_per_token(8) == 78 * (656 + 8 * 132)


def test_the_model_shape_charges_latent_and_indexer(configs):
    shape = derive(configs["deepseek-v3.2"], tp_size=8, kv_dtype="fp8_e4m3", name="v32")
    assert shape.family == "dsa"
    assert shape.kv_bytes_per_token == 61 * (656 + 132)
    assert shape.kv_read_bytes_per_token == 61 * 132  # the indexer scans every token
    assert shape.kv_read_bytes_per_request == 61 * 2048 * 656  # the top-k latent rows
