"""Roofline charts drawn with matplotlib (SVG with real text, or PNG).

Log-log axes: arithmetic intensity (FLOP/byte) against attainable performance (TFLOP/s = 1e12 FLOP/s).
One flat roof per compute dtype/unit, one slope per memory level, ridge points marked, each analysed
point labelled with its name and bound. Nominal roofs are dashed; measured (effective) ones solid.
Every artist carries an id (gid) so that a test or a script can find it in the SVG.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from service.core.hardware import DeviceSpec
from service.core.roofs import MeasuredRoofs, RoofMode, select_compute_roof, select_memory_roof

TERA = 1e12


@dataclass(frozen=True)
class PlotPoint:
    name: str
    arithmetic_intensity: float
    flops_per_s: float
    bound: str


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower())


def roofline_figure(device: DeviceSpec, measured: MeasuredRoofs, *, dtypes: list[tuple[str, str]],
                    levels: list[str], roofs: str, points: list[PlotPoint], image_format: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # keep labels as <text>, readable and searchable
    modes = [RoofMode.nominal] if roofs == "nominal" else [RoofMode.nominal, RoofMode.effective]
    computes, memories, ridges = [], [], []
    for mode in modes:
        mode_computes, mode_memories = [], []
        for dtype, unit in dtypes:
            roof, _ = select_compute_roof(device, measured, dtype, unit, mode)
            if (roof.dtype, roof.unit) == (dtype, unit):
                mode_computes.append((f"{dtype} {unit}", roof.flops_per_s, roof.source.value))
        for level in levels:
            roof = select_memory_roof(device, measured, level, mode)
            if roof:
                mode_memories.append((level, roof.bytes_per_s, roof.source.value))
        # The nominal chart draws everything; the effective one adds only what measurements changed.
        fresh = (lambda source: True) if mode == RoofMode.nominal else (lambda source: source == "measured")
        computes += [c for c in mode_computes if fresh(c[2])]
        memories += [m for m in mode_memories if fresh(m[2])]
        ridges += [(c[0], m[0], c[1] / m[1], c[1]) for c in mode_computes for m in mode_memories
                   if mode == RoofMode.nominal or "measured" in (c[2], m[2])]
    if not computes or not memories:
        raise ValueError("nothing to draw: no compute roof for the dtypes or no bandwidth for the levels asked for")

    intensities = [r[2] for r in ridges] + [p.arithmetic_intensity for p in points if p.arithmetic_intensity > 0]
    low = 10 ** math.floor(math.log10(max(min(intensities) / 100, 1e-3)))
    high = 10 ** math.ceil(math.log10(max(intensities) * 100))
    fig, ax = plt.subplots(figsize=(9, 6), dpi=100)
    ax.set_xscale("log")
    ax.set_yscale("log")
    styles = {"nominal": "--", "measured": "-"}
    peak = max(c[1] for c in computes)
    for level, bandwidth, source in memories:
        xs = [low, peak / bandwidth]
        ax.plot(xs, [x * bandwidth / TERA for x in xs], styles[source], color="tab:blue", linewidth=1.5,
                gid=f"roof-memory-{level}-{source}", label=f"{level} {bandwidth / 1e9:,.0f} GB/s ({source})")
    for name, flops, source in computes:
        ridge = min(flops / m[1] for m in memories)
        ax.plot([ridge, high], [flops / TERA] * 2, styles[source], color="tab:red", linewidth=1.5,
                gid=f"roof-compute-{_slug(name)}-{source}", label=f"{name} {flops / TERA:,.1f} TFLOP/s ({source})")
    for compute_name, level, ridge, flops in ridges:
        ax.plot([ridge], [flops / TERA], "o", color="black", markersize=4, gid=f"ridge-{_slug(compute_name)}-{level}")
        ax.annotate(f"ridge {ridge:.3g}", (ridge, flops / TERA), textcoords="offset points", xytext=(4, -12), fontsize=7)
    for point in points:
        if point.arithmetic_intensity <= 0 or point.flops_per_s <= 0:
            continue
        marker = "s" if point.bound == "compute" else "^"
        ax.plot([point.arithmetic_intensity], [point.flops_per_s / TERA], marker, color="tab:green", markersize=7,
                gid=f"point-{_slug(point.name)}")
        ax.annotate(f"{point.name} ({point.bound}-bound)", (point.arithmetic_intensity, point.flops_per_s / TERA),
                    textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlim(low, high)
    ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("Attainable performance (TFLOP/s, 1 TFLOP/s = 1e12 FLOP/s)")
    ax.set_title(f"Roofline: {device.name} ({device.id})")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize=7, loc="lower right")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_format, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
