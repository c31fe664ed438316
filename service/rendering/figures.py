"""What every chart shares: matplotlib set up for a server, colours a reader can tell apart, a label layout
that never lets two labels overlap, and the finished file (SVG with real text, a <title> and a <desc>; or PNG)."""

from __future__ import annotations

import gc
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.core.operators.registry import OPERATORS

# One colour per memory level (cool hues) and a sequence for compute roofs (warm and dark hues), chosen from
# the Tableau and ColorBrewer sets so that no two read alike; points are coloured by bound in two more.
LEVEL_COLOURS = {"hbm": "#1f77b4", "l2": "#2ca02c", "smem": "#17becf"}
COMPUTE_COLOURS = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#a6761d", "#e7298a",
                   "#666666", "#b15928", "#fb9a99", "#cab2d6", "#fdbf6f", "#b2df8a", "#1b9e77", "#6a3d9a")
BOUND_COLOURS = {"memory": "#f0a500", "compute": "#5b2c83", "interconnect": "#444444"}
# Operator kinds in their descriptors' colours; the rows of a step that are no operator kind in their own.
KIND_COLOURS = {name: kind.colour for name, kind in OPERATORS.items()} | {"allreduce": "#7f7f7f", "allgather": "#7f7f7f",
                                                                       "reducescatter": "#7f7f7f", "optimizer": "#bcbd22"}
LABEL_PAD = 0.15
LABEL_BOX = dict(boxstyle=f"square,pad={LABEL_PAD}", facecolor="white", edgecolor="none", alpha=0.85)


def new_figure(width: float, height: float):
    """A figure of its own, drawn by Agg: no pyplot state, so charts may be drawn in several threads at once."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    matplotlib.rcParams["svg.fonttype"] = "none"  # labels stay <text>: readable, searchable, selectable
    matplotlib.rcParams["svg.hashsalt"] = "roofline"  # the same ids from one run to the next
    # Unhinted glyphs: Agg then measures text as the SVG writer does, so the label layout holds in both.
    matplotlib.rcParams["text.hinting"] = "none"
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def release(fig) -> None:
    """Frees a drawn figure now. A figure is a web of reference cycles (artists and their figure, axes and their
    transforms) that only the cycle collector frees; the service runs it rarely (main.GC_THRESHOLDS), so each
    chart's few megabytes outlived it (40 model-roofline charts grew a worker from 186 to 314 MB, 160 to 161 MB with
    this). Clearing the figure breaks most cycles; a full collection frees the rest, about 5 ms beside a chart's
    hundreds (the start-up objects are frozen out of it)."""
    fig.clear()
    gc.collect()


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


@dataclass
class Label:
    """A text to place near `anchor` (data coordinates) at the first offset (points) where it overlaps nothing."""

    artist: Any  # a matplotlib Annotation
    offsets: Sequence[tuple[float, float]]
    x_range: tuple[float, float] | None = None  # display x the label must stay within (a roof's own extent)
    # A label the chart cannot be read without (a roof's): where every place is taken by markers it goes over them,
    # never over another label. The bf16 roof, on which a model's matmuls all sit, lost its label otherwise.
    essential: bool = False


def place_labels(fig, ax, labels: list[Label], obstacles=()) -> None:
    """Greedy layout: each label, in order, takes the first candidate offset whose box stays inside the axes and
    clear of every label placed before it and of the obstacles (an essential label, failing that, of the labels
    only); a label with no such place is hidden, never drawn over another."""
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    placed: list[Any] = []
    for label in labels:
        box = _first_free_place(fig, renderer, inside, label, [*obstacles, *placed])
        if box is None and label.essential:
            box = _first_free_place(fig, renderer, inside, label, placed)
        if box is None:
            label.artist.set_visible(False)
        else:
            placed.append(box)


def _first_free_place(fig, renderer, inside, label: Label, taken: Sequence[Any]) -> Any | None:
    """The padded box of the label at its first candidate offset inside the axes that overlaps nothing taken,
    leaving the label there; None where there is none."""
    from matplotlib.text import Text

    # The white box around a label reaches LABEL_PAD em beyond its text (more, as seen axis-aligned, once rotated).
    pad = 1.5 * LABEL_PAD * label.artist.get_fontsize() * fig.dpi / 72 + 1
    for offset in label.offsets:
        label.artist.xyann = offset
        # The text's own box: an annotation's extent would include its leader line.
        label.artist.update_positions(renderer)
        box = Text.get_window_extent(label.artist, renderer).padded(pad)
        within = (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1)
        if label.x_range is not None:
            within = within and label.x_range[0] <= box.x0 and box.x1 <= label.x_range[1]
        if within and not any(box.overlaps(other) for other in taken):
            return box
    return None


def around(radius: float, steps: int = 3) -> list[tuple[float, float]]:
    """Offsets around a point, nearest first: right, above, below, left and the diagonals, at growing radii."""
    directions = [(1, 0.3), (1, -1), (1, 1), (-1, 0.3), (0, 1.4), (0, -1.6), (-1, -1), (-1, 1)]
    return [(dx * radius * (k + 1) + (0 if dx >= 0 else -radius), dy * radius * (k + 1))
            for k in range(steps) for dx, dy in directions]


def finished(fig, image_format: str, title: str, description: str) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_format, bbox_inches="tight")
    data = buffer.getvalue()
    release(fig)
    if image_format != "svg":
        return data
    return _with_ids(data, title, description)


SVG_NS, XLINK_NS = "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"


def _with_ids(svg: bytes, title: str, description: str) -> bytes:
    """The SVG with a <title> and a <desc> first, and an id on every drawn element: matplotlib names its groups,
    and each element inside one without a name of its own is called after its group and its place in it."""
    import xml.etree.ElementTree as ET

    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    root = ET.fromstring(svg)
    for tag, text in (("desc", description), ("title", title)):
        element = ET.Element(f"{{{SVG_NS}}}{tag}")
        element.text = text
        root.insert(0, element)

    def name(element, owner: str, path: str) -> None:
        """`owner`: the nearest named ancestor; generated ids start with "el-", apart from the chart's own names."""
        for index, child in enumerate(element):
            tag = child.tag.rsplit("}", 1)[-1]
            if tag in ("title", "desc", "style", "defs"):
                continue
            place = f"{path}{tag}{index}"
            if child.get("id") is None:
                child.set("id", f"el-{owner}-{place}")
                name(child, owner, place + "-")
            else:
                name(child, child.get("id"), "")

    name(root, "chart", "")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
