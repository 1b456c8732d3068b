import pytest

from course_lib import get_hardware
from course_lib.core.data import load_catalog
from course_lib.core.hardware import custom_hardware

REQUIRED = ["rtx-3090", "rtx-4090", "a100-40gb", "a100-80gb", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h200",
            "l4", "l40s", "mi300x", "m2-ultra", "m3-max"]

# (bandwidth GB/s, capacity GB as printed on the box, dense fp16 TFLOP/s) from the course's sourced hardware table
DATASHEET = {"rtx-3090": (936, 24, 71), "rtx-4090": (1008, 24, 165.2), "a100-40gb": (1555, 40, 312),
             "a100-80gb": (2039, 80, 312), "a100-80gb-pcie": (1935, 80, 312), "h100-sxm": (3350, 80, 989),
             "h100-pcie": (2000, 80, 756), "h200": (4800, 141, 989), "l4": (300, 24, 121), "l40s": (864, 48, 362),
             "mi300x": (5300, 192, 1307), "m2-ultra": (800, 192, None), "m3-max": (400, 128, None)}


@pytest.mark.parametrize("name", REQUIRED)
def test_catalog_matches_datasheet(name):
    catalog = load_catalog("hardware")
    hw = get_hardware(name)
    bw, cap, fp16 = DATASHEET[name]
    assert hw.bandwidth == bw * 1e9
    assert hw.capacity_marketing_gb == cap
    assert hw.capacity == catalog["hardware"][name]["capacity_bytes"] and hw.capacity_source.strip()
    assert hw.source.strip()
    if fp16 is None:
        with pytest.raises(ValueError, match="no published dense fp16"):
            hw.flops("fp16")
    else:
        assert hw.flops("fp16") == pytest.approx(fp16 * 1e12)
        for k, v in hw.sparse_flops.items():  # sparse figures never leak into the dense field
            assert v > hw.peak_flops.get(k, 0)


def test_memory_types_and_ridge_point():
    assert get_hardware("rtx-4090").memory_type == "GDDR6X"
    assert get_hardware("h200").memory_type == "HBM3e"
    assert "unified" in get_hardware("m2-ultra").memory_type
    assert get_hardware("h100-sxm").ridge_point() == pytest.approx(989e12 / 3.35e12)
    assert round(get_hardware("h100-sxm").ridge_point()) == 295


def test_source_compute_example():
    assert get_hardware("a100-40gb").flops("fp16") * 0.6 == pytest.approx(187.2e12)


def test_custom_and_bad():
    hw = custom_hardware("mine", bandwidth=50e9, peak_flops=1e12)
    assert hw.flops("bf16") == 1e12
    with pytest.raises(ValueError, match="bandwidth"):
        custom_hardware("bad", bandwidth=0)
    with pytest.raises(ValueError, match="bandwidth"):
        custom_hardware("bad", bandwidth=-5)
    with pytest.raises(TypeError, match="bandwidth"):
        custom_hardware("bad", bandwidth="fast")
    with pytest.raises(ValueError, match="rtx-4090"):
        get_hardware("rtx4090")
    assert get_hardware("m2-ultra").with_peak("fp16", 27e12).flops("fp16") == 27e12
