"""2026 weight formats: bits per weight from the block structure, each with a source; their compute rates."""
import pytest

from course_lib.core import precision as pr
from course_lib.core.precision import block_format, bytes_per_element, default_kv_precision, get_precision

# name: (block, element bits, scale bits, zero bits, bits per weight worked by hand)
STRUCTURAL = {
    "int4-g128": (128, 4, 16, 0, 4.125), "int4-g128-asym": (128, 4, 16, 4, 4.15625),
    "q4_0": (32, 4, 16, 0, 4.5), "q4_1": (32, 4, 16, 16, 5.0), "q8_0": (32, 8, 16, 0, 8.5),
    "q4_k": (32, 4, 10, 6, 4.5), "q6_k": (16, 6, 9, 0, 6.5625),
    "mxfp4": (32, 4, 8, 0, 4.25), "nvfp4": (16, 4, 8, 0, 4.5),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_block_formats_cost_what_their_blocks_hold(name):
    block, elem, scale, zero, by_hand = STRUCTURAL[name]
    p = get_precision(name)
    assert (p.block, p.element_bits, p.scale_bits, p.zero_bits) == (block, elem, scale, zero)
    assert p.bits == (block * elem + scale + zero) / block == by_hand
    assert bytes_per_element(name) == by_hand / 8
    assert p.source.strip() and p.description.strip()


def test_k_quant_super_blocks_add_up():
    # q4_K: 256 weights = 8 x 32, each sub-block a 6-bit scale and 6-bit min, plus fp16 d and dmin
    assert get_precision("q4_k").bits == (256 * 4 + 8 * (6 + 6) + 2 * 16) / 256
    # q6_K: 256 weights = 16 x 16, each an 8-bit scale, plus one fp16 d
    assert get_precision("q6_k").bits == (256 * 6 + 16 * 8 + 16) / 256


def test_group_scales_add_an_eighth_to_a_quarter_bit_over_bare_int4():
    extra = [get_precision(n).bits - get_precision("int4").bits for n in ("int4-g128", "int4-g128-asym")]
    assert all(0.125 <= e <= 0.25 for e in extra)
    assert get_precision("gptq") == get_precision("awq") == get_precision("int4-g128-asym")


def test_q4_k_m_is_the_mix_llama_cpp_reports_between_its_parts():
    q = get_precision("q4_k_m")
    assert q.block is None and "llama.cpp" in q.source and "4.84" in q.source
    assert get_precision("q4_k").bits < q.bits < get_precision("q6_k").bits


def test_every_format_names_a_source_and_a_compute_rate():
    for p in pr.PRECISIONS.values():
        assert p.source.strip(), p.name
    assert get_precision("w8a8").compute_dtype == "int8" and get_precision("int8").compute_dtype == "fp16"
    assert get_precision("mxfp4").compute_dtype == get_precision("nvfp4").compute_dtype == "fp4"
    assert get_precision("int4-g128").compute_dtype == "fp16"      # weight-only: dequantised to fp16
    assert default_kv_precision("nvfp4") == default_kv_precision("w8a8") == "fp16"


def test_block_format_checks_its_arguments():
    assert block_format("x", 4, 128, 16).bits == 4.125
    with pytest.raises(ValueError, match="block"):
        block_format("x", 4, 0, 16)
    with pytest.raises(ValueError, match="element_bits"):
        block_format("x", 0, 32, 16)
    with pytest.raises(ValueError, match="at most 64"):
        block_format("x", 64, 1, 8)
