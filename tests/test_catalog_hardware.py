"""Hardware catalog: capacities in bytes with their sources, int8/fp4 rates, interconnects, the 2025-26 devices."""
import pytest

from course_lib import get_hardware
from course_lib.core.data import load_catalog
from course_lib.core.hardware import Interconnect, list_hardware

MiB = 2 ** 20
# driver-reported memory.total (nvidia-smi, MiB) against the box's "GB"
DRIVER_MIB = {"rtx-3090": (24576, 24), "rtx-4090": (24564, 24), "a100-40gb": (40960, 40), "a100-80gb": (81920, 80),
              "a100-80gb-pcie": (81920, 80), "h100-sxm": (81559, 80), "h100-pcie": (81559, 80),
              "h200": (143771, 141), "l4": (23034, 24), "l40s": (46068, 48), "b200": (183359, 180),
              "rtx-5090": (32607, 32)}
NEW = {"b200": (8000, 2250), "mi325x": (6000, 1307.4), "mi355x": (8000, 2516.6), "rtx-5090": (1792, 209.5),
       "gb200": (8000, 2500), "dgx-spark": (273, None), "tpu-v5e": (819, None)}


@pytest.mark.parametrize("name", sorted(DRIVER_MIB))
def test_capacity_is_what_the_driver_reports(name):
    mib, box = DRIVER_MIB[name]
    hw = get_hardware(name)
    assert hw.capacity == mib * MiB and hw.capacity_marketing_gb == box
    assert f"{mib:,} MiB" in hw.capacity_source and "nvidia-smi" in hw.capacity_source


def test_no_single_convention_holds():
    h200, rtx = get_hardware("h200"), get_hardware("rtx-4090")
    assert h200.capacity < h200.capacity_marketing_gb * 2 ** 30          # 140.4 GiB, not 141 GiB
    assert h200.capacity > h200.capacity_marketing_gb * 1e9              # but more than 141e9 bytes
    assert rtx.capacity == 24 * 2 ** 30 - 12 * MiB                       # 24 GiB less what the driver keeps
    assert get_hardware("mi300x").capacity == 192 * 2 ** 30
    for name, gib in (("mi325x", 256), ("mi355x", 288)):                 # AMD's GB read as the MI300X reports them
        hw = get_hardware(name)
        assert hw.capacity == gib * 2 ** 30 == hw.capacity_marketing_gb * 2 ** 30 and "MI300X" in hw.capacity_source
    for name in ("m2-ultra", "m3-max"):                                  # no driver figure cited: the vendor's GB
        hw = get_hardware(name)
        assert hw.capacity == hw.capacity_marketing_gb * 1e9 and "10^9" in hw.capacity_source


def test_every_device_names_its_capacity_source_and_the_about_says_where_it_is_taught():
    about = load_catalog("hardware")["_about"]
    assert "Lesson 03 §7" in about and "lesson 01" not in about.lower()
    for name in list_hardware():
        hw = get_hardware(name)
        assert hw.capacity_source.strip() and hw.capacity > 0 and hw.capacity_marketing_gb > 0, name


@pytest.mark.parametrize("name, dense", [("a100-40gb", 624), ("a100-80gb", 624), ("l4", 242.5), ("h100-sxm", 1979),
                                         ("h100-pcie", 1513), ("h200", 1979), ("l40s", 733), ("rtx-3090", 284),
                                         ("rtx-4090", 660.6), ("mi300x", 2614.9), ("b200", 4500),
                                         ("mi325x", 2614.9), ("mi355x", 5033.2)])
def test_int8_tensor_rate_doubles_the_fp16_rate_where_published(name, dense):
    hw = get_hardware(name)
    assert hw.flops("int8") == pytest.approx(dense * 1e12)
    assert hw.flops("int8") >= 1.99 * hw.flops("fp16")
    assert hw.sparse_flops["int8"] == pytest.approx(2 * hw.flops("int8"), rel=1e-4)   # vendors round each figure
    assert load_catalog("hardware")["hardware"][name].get("int8_source", "").strip() or name == "b200"


def test_fp4_rates_on_blackwell_and_cdna4_only():
    for name in ("b200", "mi355x", "rtx-5090"):
        hw = get_hardware(name)
        assert hw.flops("fp4") > 0
        if name != "mi355x":                      # AMD gives MXFP4 no structured-sparsity rate
            assert hw.sparse_flops["fp4"] == pytest.approx(2 * hw.flops("fp4"))
    for name in ("h100-sxm", "h200", "mi300x", "mi325x"):
        with pytest.raises(ValueError, match="no published dense fp4"):
            get_hardware(name).flops("fp4")
    assert get_hardware("b200").flops("fp4") == 2 * get_hardware("b200").flops("fp8") == 4 * get_hardware(
        "b200").flops("fp16")


@pytest.mark.parametrize("name", sorted(NEW))
def test_new_devices_have_sources_and_sparse_figures_stay_out_of_the_dense_field(name):
    bw, fp16 = NEW[name]
    hw = get_hardware(name)
    assert hw.bandwidth == bw * 1e9 and hw.source.strip() and hw.display
    if fp16 is None:
        with pytest.raises(ValueError, match="no published dense fp16"):
            hw.flops("fp16")
    else:
        assert hw.flops("fp16") == pytest.approx(fp16 * 1e12)
    for k, v in hw.sparse_flops.items():
        assert v > hw.peak_flops.get(k, 0)


def test_b300_is_listed_as_missing_not_invented():
    assert "b300" not in list_hardware()
    assert "B300" in load_catalog("hardware")["_about"]


SCALE_UP = {"a100-40gb": 600, "a100-80gb": 600, "h100-sxm": 900, "h200": 900, "b200": 1800, "mi300x": 896,
            "mi325x": 896, "mi355x": 1075.2}


@pytest.mark.parametrize("name", sorted(SCALE_UP))
def test_scale_up_links_per_direction_are_half_the_headline(name):
    link = get_hardware(name).scale_up
    assert link.bidirectional_bandwidth == SCALE_UP[name] * 1e9
    assert link.per_direction_bandwidth == link.bidirectional_bandwidth / 2
    assert link.links * link.per_link_bidirectional_bandwidth == pytest.approx(link.bidirectional_bandwidth)
    assert link.source.strip() and link.topology


def test_amd_point_to_point_peers_get_one_link():
    link = get_hardware("mi300x").interconnects["infinity_fabric"]
    assert link.per_link_per_direction_bandwidth == 64e9 == link.per_direction_bandwidth / 7
    nv = get_hardware("h100-sxm").scale_up
    assert nv.achieved_per_direction == 370e9 < nv.per_direction_bandwidth == 450e9 and "nccl" in nv.achieved_source


def test_pcie_links_and_devices_without_a_scale_up_link():
    for name in ("rtx-4090", "rtx-5090", "l4", "l40s"):
        hw = get_hardware(name)
        assert hw.scale_up is None and hw.interconnects["pcie"].per_direction_bandwidth > 0
    assert get_hardware("h100-sxm").interconnects["pcie"].per_direction_bandwidth == 64e9
    assert get_hardware("a100-80gb").interconnects["pcie"].per_direction_bandwidth == 32e9
    assert get_hardware("m2-ultra").interconnects == {}


def test_catalog_json_fields_agree_with_the_specs():
    raw = load_catalog("hardware")["hardware"]
    for name in list_hardware():
        for key, e in raw[name]["interconnects"].items():
            assert e["per_direction_GBps"] * 2 == e["bidirectional_GBps"], (name, key)
            assert key in ("nvlink", "infinity_fabric", "pcie")
            assert get_hardware(name).interconnects[key].per_direction_bandwidth == e["per_direction_GBps"] * 1e9


def test_interconnect_checks_its_arguments():
    assert Interconnect("x", 100e9).per_direction_bandwidth == 50e9
    assert Interconnect("x", 100e9).per_link_per_direction_bandwidth == 50e9
    with pytest.raises(ValueError, match="bidirectional_bandwidth"):
        Interconnect("x", 0)
    with pytest.raises(ValueError, match="links"):
        Interconnect("x", 1e9, links=0)
    with pytest.raises(TypeError, match="name"):
        Interconnect("", 1e9)


def test_every_device_prices_a_decode_step_and_effective_rates_are_marked():
    from course_lib import estimate
    for name in list_hardware(every=True):
        hw = get_hardware(name)
        e = estimate("llama-3-8b", name, 128, 4)                       # raises if fp16 work cannot be priced
        assert e.tpot > 0 and e.ttft > 0, name
        if hw.rate_is_effective("fp16"):                                # a derived rate never poses as a datasheet peak
            assert "EFFECTIVE" in hw.effective_basis or "bf16" in hw.effective_basis, name
            with pytest.raises(ValueError, match="no published dense fp16"):
                hw.flops("fp16")
    for name in ("m1", "m1-pro", "m1-max", "m1-ultra", "m2", "m2-pro", "m2-max", "m2-ultra", "m3", "m3-pro", "m3-max",
                 "m3-ultra", "m4", "m4-pro", "m4-max"):
        hw = get_hardware(name)
        assert hw.rate_is_effective("fp16") and "measured" in hw.effective_basis, name
    assert set(list_hardware()) < set(list_hardware(every=True))
    assert "GDDR7" in load_catalog("hardware")["hardware"]["rtx-5090"]["memory_note"]
    with pytest.raises(TypeError, match="every"):
        list_hardware(every="yes")
