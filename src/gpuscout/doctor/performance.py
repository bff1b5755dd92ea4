"""Performance against the expected bands per SKU (docs/doctor.md §4.3).

Matmul burst and sustained per dtype, the SKU variant a measured rate gives away, stragglers among
the GPUs, device memory bandwidth, pinned host↔device copies against the band of the card's link,
the GPU-to-GPU matrix and the all-reduce bus bandwidth. Pure: cases in, findings out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpuscout.doctor.identity import label
from gpuscout.doctor.verdict import finding, info, judge, position, shown
from gpuscout.hardware.bands import band_for, host_copy_band, variants_of
from gpuscout.hardware.catalog import Gpu, peak_flops_per_s
from gpuscout.results.schema import Case, DoctorFinding, Metric

# A soak at the power limit may run a few percent under a short burst; sustained rates are judged
# against the band with its low end lowered by this much (ASSUMPTION, docs/doctor.md §4.3).
SOAK_ALLOWANCE = 0.05
SOAK_DROP_WARN = 0.10  # sustained more than 10% under burst: the clocks fell under load
# A GPU this far under the node's median is a straggler: in a multi-GPU job the slowest sets the pace
# (MAMF, 'Not all accelerators are created equal', saw 5% between healthy GPUs of one node).
STRAGGLER = 0.90
# A GPU pair this far under the median pair: a link or topology fault, not the usual difference
# between pairs on one switch and across two (NVIDIA/nvbandwidth#50: 21.8 vs 26.3 GB/s, 83%).
PAIR_WARN, PAIR_FAIL = 0.75, 0.50


def metric(case: Case, name: str) -> Metric | None:
    return next((m for m in case.metrics if m.name == name), None)


def gpu_of(case: Case) -> int | None:
    value = case.params.get("gpu")
    return value if isinstance(value, int) else None


def on(case: Case) -> str:
    """", GPU 3" or ", worker 1" (CPU workers), for the finding lines."""
    for key, name in (("gpu", "GPU"), ("worker", "worker")):
        value = case.params.get(key)
        if isinstance(value, int):
            return f", {name} {value}"
    return ""


def matmul_findings(cases: Sequence[Case], sku: str | None, catalog: Gpu | None) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    for dtype in dict.fromkeys(str(c.params.get("dtype")) for c in cases if c.name.startswith("matmul")):
        ours = [c for c in cases if c.name.startswith(f"matmul {dtype}") and c.failure is None]
        out += [f for c in ours for f in _matmul_case(c, dtype, sku, catalog)]
        out += _stragglers(ours, "burst_flop_per_s", f"matmul {dtype} burst")
    return out


def _matmul_case(case: Case, dtype: str, sku: str | None, catalog: Gpu | None) -> list[DoctorFinding]:
    gpu, out = gpu_of(case), []
    burst, sustained = metric(case, "burst_flop_per_s"), metric(case, "sustained_flop_per_s")
    band = band_for(f"matmul_{dtype}", sku)
    for m, what, allowance in ((burst, "burst", 0.0), (sustained, "sustained", SOAK_ALLOWANCE)):
        if m is None:
            continue
        check = f"matmul {dtype} {what}"
        if band is not None:
            out.append(judge(check, "performance", m.value, "FLOP/s", band, gpu=gpu, allowance=allowance))
        else:
            out.append(info(check, "performance", f"{check}{on(case)}: {shown(m.value, 'FLOP/s')}"
                            f"{_of_peak(m.value, catalog, dtype)}; no published band", gpu=gpu, value=m.value,
                            unit="FLOP/s"))
    # CPU workers share cores with each other (and whatever else runs): their soak says nothing of clocks.
    if gpu is not None and burst is not None and sustained is not None \
            and sustained.value < burst.value * (1 - SOAK_DROP_WARN):
        out.append(finding(f"matmul {dtype} soak", "performance", "warn",
                           f"matmul {dtype}{on(case)}: sustained {shown(sustained.value, 'FLOP/s')} is "
                           f"{1 - sustained.value / burst.value:.0%} under the burst: the clocks fell under load",
                           gpu=gpu, value=sustained.value / burst.value))
    return out


def _of_peak(value: float, catalog: Gpu | None, dtype: str) -> str:
    if catalog is None or getattr(catalog, f"{dtype}_flops_per_s", None) is None:
        return ""
    return f" ({value / peak_flops_per_s(catalog, dtype):.0%} of the {catalog.name}'s datasheet peak)"


def _stragglers(cases: Sequence[Case], name: str, check: str, unit: str = "FLOP/s") -> list[DoctorFinding]:
    """GPUs well under the others' median (CPU workers share cores, so only GPUs are compared)."""
    values = [(c, m.value) for c in cases if gpu_of(c) is not None and (m := metric(c, name)) is not None]
    if len(values) < 3:
        return []  # with two, which one is slow cannot be told from the pair
    median = statistics.median(v for _, v in values)
    return [finding(f"{check} straggler", "performance", "warn",
                    f"{check}{on(c)}: {shown(v, unit)}, {1 - v / median:.0%} under the other GPUs' median",
                    gpu=gpu_of(c), value=v) for c, v in values if v < STRAGGLER * median]


def variant_findings(cases: Sequence[Case], sku: str | None) -> list[DoctorFinding]:
    """A variant behind the name: the GPUs' median bf16 burst inside another variant's band and under
    this SKU's (docs/doctor.md §4.1)."""
    group = variants_of(sku) if sku else ()
    if not group or sku is None:
        return []
    rates = [m.value for c in cases if c.name.startswith("matmul bf16") and (m := metric(c, "burst_flop_per_s"))]
    own = band_for("matmul_bf16", sku)
    if not rates or own is None:
        return []
    rate = statistics.median(rates)
    others = ({v.sku for v in group} | {v.of for v in group}) - {sku}
    bands = {o: b for o in sorted(others) if (b := band_for("matmul_bf16", o)) is not None}
    fits = [o for o, b in bands.items() if b.low <= rate <= (b.high or rate) * 1.02]
    shown_rate = f"bf16 burst {shown(rate, 'FLOP/s')}"
    if own.low <= rate <= (own.high or rate) * 1.02:
        return [finding("gpu variant", "identity", "pass", f"{shown_rate} is a {label(sku)}'s, not a "
                        f"{' or '.join(label(o) for o in sorted(others))}'s", value=rate, unit="FLOP/s")]
    if not fits:
        return []  # neither: the matmul check judges it against this SKU's band
    other, band = fits[0], bands[fits[0]]
    where = (f"fits a {label(other)} (its band {shown(band.low, 'FLOP/s')}–{shown(band.high or band.low, 'FLOP/s')}, "
             f"{position(rate, band.low, band.high) or 0:.0f}th percentile)")
    if rate < own.low:
        return [finding("gpu variant", "identity", "fail", f"{shown_rate} {where}, under a {label(sku)}'s "
                        f"{shown(own.low, 'FLOP/s')}", value=rate, unit="FLOP/s", source=", ".join(band.sources))]
    return [info("gpu variant", "identity", f"{shown_rate} {where}: more than a {label(sku)}'s band",
                 value=rate, unit="FLOP/s")]


def bandwidth_findings(cases: Sequence[Case], catalog: Gpu | None) -> list[DoctorFinding]:
    ours = [c for c in cases if c.name.startswith("device memory bandwidth") and c.failure is None]
    out = []
    for case in ours:
        m = metric(case, "memory_bandwidth_bytes_per_s")
        if m is None:
            continue
        peak = f" ({m.value / catalog.memory_bandwidth_bytes_per_s:.0%} of the datasheet's)" if catalog else ""
        out.append(info("device memory bandwidth", "performance", f"device memory bandwidth{on(case)}: "
                        f"{shown(m.value, 'bytes/s')} read + write{peak}; no published band for this copy",
                        gpu=gpu_of(case), value=m.value, unit="bytes/s"))
    return out + _stragglers(ours, "memory_bandwidth_bytes_per_s", "device memory bandwidth", "bytes/s")


def host_copy_findings(cases: Sequence[Case], card_gen: int | None, system_gen: int | None) -> list[DoctorFinding]:
    """Pinned copies against the band of a x16 link at the generation both card and slot support."""
    gen = min(g for g in (card_gen, system_gen) if g is not None) if (card_gen or system_gen) else None
    scaled = host_copy_band(gen, 16) if gen is not None else None
    out = []
    for case in (c for c in cases if c.name.startswith("host copy") and c.failure is None):
        direction = str(case.params.get("direction"))
        m = metric(case, f"{direction}_bytes_per_s")
        if m is None:
            continue
        check = f"host copy {direction}"
        if scaled is None:
            out.append(info(check, "performance", f"{check}{on(case)}: {shown(m.value, 'bytes/s')}; "
                            "the PCIe generation is unknown", gpu=gpu_of(case), value=m.value, unit="bytes/s"))
            continue
        band, factor = scaled
        out.append(judge(check, "performance", m.value, "bytes/s", band, gpu=gpu_of(case), scale=factor,
                         what=f"gen{gen} x16 link expected; "))
    return out


def p2p_findings(cases: Sequence[Case], sku: str | None, *, gpus: bool) -> list[DoctorFinding]:
    """The slowest pair against the SKU's band; on GPUs, with three pairs or more, the pairs far under
    the median (CPU workers share one memory and its cores, so their pairs differ by noise only)."""
    case = next((c for c in cases if c.name == "gpu-to-gpu copies" and c.failure is None), None)
    if case is None or not case.metrics:
        return []
    pairs = [(m.name.removeprefix("p2p_").removesuffix("_bytes_per_s").replace("_to_", "→"), m.value)
             for m in case.metrics]
    median = statistics.median(v for _, v in pairs)
    slow = [(p, v) for p, v in pairs if v < PAIR_WARN * median] if gpus and len(pairs) >= 3 else []
    out = [finding("gpu pair", "performance", "fail" if v < PAIR_FAIL * median else "warn",
                   f"GPU pair {p}: {shown(v, 'bytes/s')}, {v / median:.0%} of the median pair "
                   f"({shown(median, 'bytes/s')}): a slow link or a detour through the host", value=v, unit="bytes/s")
           for p, v in slow]
    band = band_for("p2p_copy", sku)
    worst_pair, worst = min(pairs, key=lambda pv: pv[1])
    if band is not None:
        out.append(judge("gpu-to-gpu copies", "performance", worst, "bytes/s", band,
                         what=f"slowest pair {worst_pair}: "))
    elif not slow:
        out.append(info("gpu-to-gpu copies", "performance", f"gpu-to-gpu copies: {len(pairs)} pairs, "
                        f"{shown(worst, 'bytes/s')}–{shown(max(v for _, v in pairs), 'bytes/s')}; no published band",
                        value=worst, unit="bytes/s"))
    return out


def allreduce_findings(cases: Sequence[Case], sku: str | None) -> list[DoctorFinding]:
    case = next((c for c in cases if c.name == "all-reduce" and c.failure is None), None)
    if case is None:
        return []
    out = []
    wrong = metric(case, "wrong_elements")
    if wrong is not None and wrong.value > 0:
        out.append(finding("all-reduce result", "performance", "fail", f"all-reduce returned {wrong.value:,.0f} wrong "
                           "elements of 1,048,576: the GPUs or their links corrupt data", value=wrong.value))
    busbw = [m for m in case.metrics if m.name.startswith("busbw_")]
    if not busbw:
        return out
    largest = max(busbw, key=lambda m: int(m.name.split("_")[1]))
    size = int(largest.name.split("_")[1])
    world = int(case.params.get("world_size") or 0)
    band = band_for("allreduce_busbw", sku, gpus=world) if case.params.get("backend") == "nccl" else None
    check = "all-reduce bus bandwidth"
    if band is not None:
        out.append(judge(check, "performance", largest.value, "bytes/s", band, what=f"{size / 2**20:g} MiB: "))
    else:
        out.append(info(check, "performance", f"{check}: {shown(largest.value, 'bytes/s')} at {size / 2**20:g} MiB "
                        f"over {world} {case.params.get('backend')} ranks; no published band for this setup",
                        value=largest.value, unit="bytes/s"))
    return out
