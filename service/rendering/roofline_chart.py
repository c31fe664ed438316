"""Roofline charts: log-log, arithmetic intensity (FLOP/byte) against attainable performance (TFLOP/s).

One slope per memory level, each in its level's colour; one flat roof per compute (dtype, unit), each in a
colour of its own (roofs of equal height and source drawn once, labelled with every dtype they serve);
nominal dashed, measured solid in the same colour; every roof labelled once along its own line. Ridge
points only for the dtypes asked for (by default those of the points drawn, or the device's headline
dtype). Each kernel sits at its HBM intensity, coloured by its bound, numbered, with one smaller marker per
other memory level joined to it; the numbers are keyed below the chart. Axes fit the roofs and points.
Every drawn element carries an id.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from service.core.hardware import DeviceSpec
from service.core.roofs import MeasuredRoofs, RoofMode, select_compute_roof, select_memory_roof
from service.rendering.figures import (
    BOUND_COLOURS,
    COMPUTE_COLOURS,
    LABEL_BOX,
    LEVEL_COLOURS,
    Label,
    around,
    finished,
    new_figure,
    place_labels,
    slug,
)

TERA = 1e12
STYLES = {"nominal": (0, (5, 3)), "measured": "-"}
KEY_LINE_INCHES = 0.19


@dataclass(frozen=True)
class PlotPoint:
    name: str
    arithmetic_intensity: float  # FLOPs per HBM byte
    flops_per_s: float  # attainable
    bound: str
    levels: tuple[tuple[str, float], ...] = ()  # (level, intensity) of the other memory levels with known traffic
    dtype: str | None = None  # the compute dtype, for its ridge
    share: float | None = None  # of a step's time: sizes the marker


@dataclass(frozen=True)
class _Roof:
    names: tuple[str, ...]  # "bf16 tensor", ...
    value: float  # FLOP/s or bytes/s
    source: str
    colour: str

    @property
    def key(self) -> str:
        return "+".join(slug(n) for n in self.names)


def _roofs(device: DeviceSpec, measured: MeasuredRoofs, dtypes: Sequence[tuple[str, str]], levels: Sequence[str],
           roofs: str) -> tuple[list[_Roof], list[_Roof]]:
    """(compute roofs, memory roofs) to draw: every nominal one, and the measured ones that differ."""
    modes = [RoofMode.nominal] if roofs == "nominal" else [RoofMode.nominal, RoofMode.effective]
    colours = dict(zip(dtypes, COMPUTE_COLOURS * 2))
    computes: dict[tuple[float, str], list[tuple[str, str]]] = {}
    memories: list[_Roof] = []
    for mode in modes:
        for dtype, unit in dtypes:
            roof, _ = select_compute_roof(device, measured, dtype, unit, mode)
            if (roof.dtype, roof.unit) == (dtype, unit) and (mode == RoofMode.nominal or roof.source.value == "measured"):
                computes.setdefault((roof.flops_per_s, roof.source.value), []).append((dtype, unit))
        for level in levels:
            memory_roof = select_memory_roof(device, measured, level, mode)
            if memory_roof and (mode == RoofMode.nominal or memory_roof.source.value == "measured"):
                memories.append(_Roof((level,), memory_roof.bytes_per_s, memory_roof.source.value, LEVEL_COLOURS[level]))
    compute = [_Roof(tuple(f"{d} {u}" for d, u in keys), value, source, colours[keys[0]])
               for (value, source), keys in computes.items()]
    return compute, memories


def _ridge_keys(points: list[PlotPoint], ridges: Sequence[str] | None, computes: list[_Roof]) -> set[str]:
    if ridges is not None:
        return set(ridges)
    wanted = {p.dtype for p in points if p.dtype}
    if wanted:
        return wanted
    names = [n for roof in computes for n in roof.names]
    for headline in ("bf16 tensor", "fp16 tensor", "fp32 vector"):
        if headline in names:
            return {headline.split()[0]}
    return {names[0].split()[0]} if names else set()


@dataclass(frozen=True)
class _Limits:
    x_low: float
    x_high: float
    y_low: float
    y_high: float


def _limits(computes: list[_Roof], memories: list[_Roof], drawn: list[PlotPoint]) -> _Limits:
    """Axes wide enough for every ridge and point (at every memory level), with a margin."""
    all_ridges = [c.value / m.value for c in computes for m in memories]
    intensities = all_ridges + [p.arithmetic_intensity for p in drawn] + [i for p in drawn for _, i in p.levels if i > 0]
    x_low, x_high = min(intensities) / 8, max(intensities) * 6
    # The highest roof's label sits on its own line beyond its ridge: where a device's ridges span many decades (a
    # B300's fp64 is 1/10,000 of its fp4) six times that ridge is too short a line for it, so the axis reaches on.
    x_high = max(x_high, max(intensities) * (max(intensities) / x_low) ** (1 / 4))
    slowest = min(m.value for m in memories)
    perf = [p.flops_per_s for p in drawn] + [slowest * x_low]
    return _Limits(x_low, x_high, min(perf) / 3, max(c.value for c in computes) * 3)


def _marked_ridges(computes: list[_Roof], memories: list[_Roof], ridge_dtypes: set[str]) -> list[tuple[_Roof, _Roof]]:
    """(compute, memory) roofs whose ridge is marked: the asked-for dtypes against HBM (else every level)."""
    hbm = [m for m in memories if m.names == ("hbm",)] or memories
    return [(c, m) for c in computes for m in hbm if any(n.split()[0] in ridge_dtypes for n in c.names)]


def _numbered(drawn: list[PlotPoint]) -> list[PlotPoint]:
    """The points keyed by number below the chart: the 24 largest shares of the time, else the first 24."""
    ordered = sorted(drawn, key=lambda p: -(p.share or 0)) if any(p.share for p in drawn) else drawn
    return ordered[:24]


def roofline_figure(device: DeviceSpec, measured: MeasuredRoofs, *, dtypes: Sequence[tuple[str, str]],
                    levels: Sequence[str], roofs: str, points: list[PlotPoint], image_format: str,
                    ridges: Sequence[str] | None = None, title: str | None = None) -> bytes:
    computes, memories = _roofs(device, measured, dtypes, levels, roofs)
    if not computes or not memories:
        raise ValueError("nothing to draw: no compute roof for the dtypes or no bandwidth for the levels asked for")
    marked = _marked_ridges(computes, memories, _ridge_keys(points, ridges, computes))
    drawn = [p for p in points if p.arithmetic_intensity > 0 and p.flops_per_s > 0]
    limits = _limits(computes, memories, drawn)
    numbered = _numbered(drawn)
    key_lines = len(numbered) + (1 if len(drawn) > len(numbered) else 0)
    fig = new_figure(9, 6.2 + KEY_LINE_INCHES * key_lines)
    key_fraction = KEY_LINE_INCHES * key_lines / fig.get_figheight()
    ax = fig.add_axes((0.1, 0.1 + key_fraction, 0.86, 0.8 - key_fraction))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(limits.x_low, limits.x_high)
    ax.set_ylim(limits.y_low / TERA, limits.y_high / TERA)
    _draw_roofs(ax, computes, memories, limits)
    fig.canvas.draw()  # the axes' transform is final: slopes can be measured in display space

    labels = _roof_labels(fig, ax, computes, memories, limits) + _draw_ridges(ax, marked)
    for number, point in enumerate(numbered, start=1):
        _draw_point(ax, point, number, labels)
    for point in drawn[len(numbered):]:
        _draw_point(ax, point, None, labels)
    ax.set_xlabel("Arithmetic intensity (FLOP/byte of HBM traffic)")
    ax.set_ylabel("Attainable performance (TFLOP/s, 1 TFLOP/s = 1e12 FLOP/s)")
    ax.set_title((title or f"Roofline: {device.name} ({device.id})") + "\ndashed: nominal (datasheet); solid: measured",
                 fontsize=10)
    ax.grid(True, which="major", linewidth=0.3, color="#cccccc")
    place_labels(fig, ax, labels, obstacles=_marker_boxes(ax, drawn, marked))
    _key(fig, numbered, len(drawn), key_fraction)
    return finished(fig, image_format, title or f"Roofline of {device.name}",
                    _description(device, computes, memories, drawn, limits))


def _draw_roofs(ax, computes: list[_Roof], memories: list[_Roof], limits: _Limits) -> None:
    peak = max(c.value for c in computes)
    for memory in memories:
        end = min(peak / memory.value, limits.x_high)
        xs = [limits.x_low, end]
        ax.plot(xs, [x * memory.value / TERA for x in xs], linestyle=STYLES[memory.source], color=memory.colour,
                linewidth=1.6, gid=f"roof-memory-{memory.key}-{memory.source}")
    for compute in computes:
        start = min(compute.value / m.value for m in memories)
        ax.plot([start, limits.x_high], [compute.value / TERA] * 2, linestyle=STYLES[compute.source],
                color=compute.colour, linewidth=1.6, gid=f"roof-compute-{compute.key}-{compute.source}")


def _roof_labels(fig, ax, computes: list[_Roof], memories: list[_Roof], limits: _Limits) -> list[Label]:
    """Each roof's label, with the places along its own line where it may go."""
    peak = max(c.value for c in computes)
    labels = [_slope_label(ax, memory, limits.x_low, min(peak / memory.value, limits.x_high)) for memory in memories]
    for compute in sorted(computes, key=lambda c: -c.value):
        start = min(compute.value / m.value for m in memories)
        text = f"{_joined(compute.names)} {_tflops(compute.value)} TFLOP/s" + (" measured" if compute.source == "measured" else "")
        anchor = (limits.x_high, compute.value / TERA)
        label = ax.annotate(text, anchor, xytext=(0, 0), textcoords="offset points", ha="right", va="bottom", fontsize=7.5,
                            color=compute.colour, bbox=LABEL_BOX, gid=f"label-roof-compute-{compute.key}-{compute.source}")
        left, right = ax.transData.transform([(start, 1), (limits.x_high, 1)])[:, 0]
        steps = range(int((right - left) * 72 / fig.dpi / 30) + 1)
        labels.append(Label(label, [(-4 - 30 * k, 3) for k in steps] + [(-4 - 30 * k, -13) for k in steps],
                            x_range=(left, right), essential=True))
    return labels


def _draw_ridges(ax, marked: list[tuple[_Roof, _Roof]]) -> list[Label]:
    labels = []
    for compute, memory in marked:
        ridge = compute.value / memory.value
        gid = f"ridge-{compute.key}-{memory.key}" + ("-measured" if "measured" in (compute.source, memory.source) else "")
        ax.plot([ridge], [compute.value / TERA], "o", color="black", markersize=4, gid=gid)
        label = ax.annotate(f"ridge {ridge:.3g}", (ridge, compute.value / TERA), xytext=(0, 0), textcoords="offset points",
                            fontsize=7, bbox=LABEL_BOX, gid=f"label-{gid}")
        labels.append(Label(label, around(7)))
    return labels


def _description(device: DeviceSpec, computes: list[_Roof], memories: list[_Roof], drawn: list[PlotPoint],
                 limits: _Limits) -> str:
    """The chart in words, for its <desc>: axes, every roof and every point."""
    axes = (f"Axes: {limits.x_low:.3g} to {limits.x_high:.3g} FLOP/byte, {limits.y_low / TERA:.3g} to "
            f"{limits.y_high / TERA:.3g} TFLOP/s. ")
    roofs = (f"Roofs of {device.id}: " + "; ".join(f"{', '.join(c.names)} {c.value:.4g} FLOP/s ({c.source})"
                                                  for c in computes)
             + "; " + "; ".join(f"{m.names[0]} {m.value:.4g} bytes/s ({m.source})" for m in memories))
    points = ". Points: " + "; ".join(f"{p.name} at {p.arithmetic_intensity:.4g} FLOP/byte, {p.flops_per_s:.4g} "
                                      f"FLOP/s, {p.bound}-bound" for p in drawn) if drawn else ""
    return axes + roofs + points


def _slope_label(ax, memory: _Roof, x_low: float, x_end: float) -> Label:
    (x0, y0), (x1, y1) = ax.transData.transform([(x_low, x_low * memory.value / TERA),
                                                 (x_end, x_end * memory.value / TERA)])
    angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
    text = f"{memory.names[0].upper()} {memory.value / 1e9:,.0f} GB/s" + (" measured" if memory.source == "measured" else "")
    # Candidates slide along the slope, from its lower end up, each a little above the line.
    positions = [x_low * (x_end / x_low) ** f for f in (0.08, 0.2, 0.32, 0.44, 0.56, 0.68)]
    anchor = (positions[0], positions[0] * memory.value / TERA)
    label = ax.annotate(text, anchor, xytext=(0, 0), textcoords="offset points", rotation=angle, rotation_mode="anchor",
                        fontsize=7.5, color=memory.colour, bbox=LABEL_BOX,
                        gid=f"label-roof-memory-{memory.key}-{memory.source}", transform_rotates_text=False)
    offsets = []
    for x in positions:
        (ax_, ay_), (bx, by) = ax.transData.transform([anchor, (x, x * memory.value / TERA)])
        for lift in (3, -12):
            offsets.append(((bx - ax_) * 72 / ax.figure.dpi - lift * math.sin(math.radians(angle)),
                            (by - ay_) * 72 / ax.figure.dpi + lift * math.cos(math.radians(angle))))
    return Label(label, offsets, essential=True)


def _draw_point(ax, point: PlotPoint, number: int | None, labels: list[Label]) -> None:
    y = point.flops_per_s / TERA
    gid = f"point-{slug(point.name)}"
    for level, intensity in point.levels:
        if intensity > 0:
            ax.plot([point.arithmetic_intensity, intensity], [y, y], color="#999999", linewidth=0.8,
                    gid=f"{gid}-join-{level}")
            ax.plot([intensity], [y], "D", color=LEVEL_COLOURS.get(level, "#999999"), markeredgecolor="black",
                    markeredgewidth=0.5, markersize=5, gid=f"{gid}-level-{level}")
    size = _marker_size(point)
    ax.plot([point.arithmetic_intensity], [y], "s" if point.bound == "compute" else "^",
            color=BOUND_COLOURS.get(point.bound, "#444444"), markeredgecolor="black", markeredgewidth=0.6,
            markersize=size, gid=gid)
    if number is not None:
        label = ax.annotate(str(number), (point.arithmetic_intensity, y), xytext=(0, 0), textcoords="offset points", fontsize=8,
                            fontweight="bold", bbox=LABEL_BOX, gid=f"label-{gid}",
                            arrowprops=dict(arrowstyle="-", color="#666666", linewidth=0.5, shrinkA=0, shrinkB=3))
        labels.append(Label(label, around(size * 0.6 + 3)))


def _marker_boxes(ax, points: list[PlotPoint], marked) -> list:
    """Display boxes of the markers, which labels must not cover."""
    from matplotlib.transforms import Bbox

    centres = [(p.arithmetic_intensity, p.flops_per_s / TERA, _marker_size(p)) for p in points]
    centres += [(i, p.flops_per_s / TERA, 5) for p in points for _, i in p.levels if i > 0]
    centres += [(c.value / m.value, c.value / TERA, 4) for c, m in marked]
    boxes = []
    for x, y, size in centres:
        (cx, cy), half = ax.transData.transform((x, y)), size / 2 * ax.figure.dpi / 72
        boxes.append(Bbox.from_extents(cx - half, cy - half, cx + half, cy + half))
    return boxes


def _marker_size(point: PlotPoint) -> float:
    return 5 + 14 * math.sqrt(point.share) if point.share is not None else 8


def _joined(names: tuple[str, ...]) -> str:
    """'bf16 tensor', 'fp16 tensor' -> 'bf16/fp16 tensor'; different units stay apart."""
    by_unit: dict[str, list[str]] = {}
    for name in names:
        dtype, unit = name.split()
        by_unit.setdefault(unit, []).append(dtype)
    return ", ".join(f"{'/'.join(dtypes)} {unit}" for unit, dtypes in by_unit.items())


def _tflops(flops_per_s: float) -> str:
    value = flops_per_s / TERA
    return f"{value:,.0f}" if value >= 100 else f"{value:,.3g}"


def _key(fig, numbered: list[PlotPoint], total: int, key_fraction: float) -> None:
    """The numbered points' names below the axes, one line each."""
    line = KEY_LINE_INCHES / fig.get_figheight()
    for index, point in enumerate(numbered):
        levels = "".join(f", {level} {intensity:.3g}" for level, intensity in point.levels)
        share = f", {point.share:.0%} of the time" if point.share is not None else ""
        fig.text(0.1, 0.02 + key_fraction - line * (index + 1),
                 f"{index + 1}  {point.name} ({point.bound}-bound): {point.arithmetic_intensity:.3g} FLOP/byte"
                 f"{levels}, {point.flops_per_s / TERA:,.3g} TFLOP/s{share}", fontsize=7.5,
                 gid=f"key-{slug(point.name)}")
    if total > len(numbered):
        fig.text(0.1, 0.02 + key_fraction - line * (len(numbered) + 1),
                 f"... and {total - len(numbered)} smaller points, unnumbered", fontsize=7.5, gid="key-more")
