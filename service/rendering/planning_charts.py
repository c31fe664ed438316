"""The planner's pictures: a step's time by operator kind (stacked bars), a sweep against its parameter with
crossovers and the largest feasible value marked, and a serving plan's Pareto frontier."""

from __future__ import annotations

from dataclasses import dataclass

from service.rendering.figures import (
    BOUND_COLOURS,
    KIND_COLOURS,
    LABEL_BOX,
    Label,
    around,
    finished,
    new_figure,
    place_labels,
    slug,
)

FALLBACK_KIND_COLOURS = ("#17becf", "#e377c2", "#bcbd22", "#c5b0d5", "#c49c94")


@dataclass(frozen=True)
class StepBar:
    label: str  # e.g. "batch 32"
    seconds_by_kind: tuple[tuple[str, float], ...]


def time_by_kind_figure(bars: list[StepBar], *, title: str, image_format: str) -> bytes:
    """One horizontal bar per step, stacked by operator kind, milliseconds; each segment of at least 4 % labelled."""
    totals: dict[str, float] = {}
    for bar in bars:
        for kind, seconds in bar.seconds_by_kind:
            totals[kind] = totals.get(kind, 0.0) + seconds
    kinds = sorted(totals, key=lambda kind: -totals[kind])  # one order of segments in every bar
    extra = iter(FALLBACK_KIND_COLOURS * 4)
    colours = {kind: KIND_COLOURS.get(kind) or next(extra) for kind in kinds}
    fig = new_figure(9, 1.6 + 0.55 * len(bars))
    ax = fig.subplots()
    for row, bar in enumerate(bars):
        left, total = 0.0, sum(s for _, s in bar.seconds_by_kind)
        seconds_of = dict(bar.seconds_by_kind)
        for kind, seconds in ((kind, seconds_of[kind]) for kind in kinds if kind in seconds_of):
            ms = seconds * 1e3
            ax.barh(row, ms, left=left, color=colours[kind], edgecolor="white", linewidth=0.6,
                    gid=f"bar-{slug(bar.label)}-{slug(kind)}", label=kind if row == 0 else None)
            if total and seconds / total >= 0.04:
                ax.text(left + ms / 2, row, f"{seconds / total:.0%}", ha="center", va="center", fontsize=7,
                        color="white", gid=f"share-{slug(bar.label)}-{slug(kind)}")
            left += ms
        ax.text(left, row, f" {left:,.3g} ms", va="center", fontsize=8, gid=f"total-{slug(bar.label)}")
    ax.set_yticks(range(len(bars)), [bar.label for bar in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("Step time (ms, roofline lower bound)")
    ax.set_title(title, fontsize=10)
    ax.margins(x=0.12)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7.5, frameon=False, title="operator kind",
              title_fontsize=7.5)
    description = "; ".join(f"{bar.label}: " + ", ".join(f"{kind} {s:.4g} s" for kind, s in bar.seconds_by_kind)
                            for bar in bars)
    return finished(fig, image_format, title, description)


@dataclass(frozen=True)
class SweepPoint:
    value: float
    metric: float
    bound: str
    fits: bool | None


def sweep_figure(points: list[SweepPoint], *, parameter: str, metric_label: str, crossovers: list[tuple[float, str]],
                 largest_feasible: float | None, title: str, image_format: str, log_x: bool,
                 expected: list[float] | None = None) -> bytes:
    """The metric against the swept value, points coloured by bound (hollow where the step does not fit),
    each crossover a vertical line, the largest feasible value marked; `expected`, the calibrated time at each
    value, dashed beside the bound."""
    fig = new_figure(9, 5.5)
    ax = fig.subplots()
    if log_x:
        ax.set_xscale("log")
    ax.plot([p.value for p in points], [p.metric for p in points], color="#555555", linewidth=1, gid="sweep-line")
    if expected is not None:
        ax.plot([p.value for p in points], expected, color="#d62728", linewidth=1.2, linestyle=(0, (5, 3)),
                gid="expected-line", label="expected (calibrated kernels)")
    _draw_points_by_bound(ax, points)
    labels = _draw_crossovers(ax, points, crossovers)
    if largest_feasible is not None:
        labels.append(_mark_largest_feasible(ax, points, largest_feasible))
    ax.set_xlabel(parameter)
    ax.set_ylabel(metric_label)
    ax.set_title(title, fontsize=10)
    ax.grid(True, linewidth=0.3, color="#cccccc")
    ax.legend(fontsize=7.5, loc="best")
    fig.canvas.draw()
    place_labels(fig, ax, labels)
    description = (f"{metric_label} against {parameter} at {len(points)} values; crossovers: "
                   + (", ".join(f"{t} at {e:.4g}" for e, t in crossovers) or "none")
                   + (f"; largest value that fits: {largest_feasible:.6g}" if largest_feasible is not None else "")
                   + (f"; expected from {expected[0]:.4g} to {expected[-1]:.4g}" if expected is not None else ""))
    return finished(fig, image_format, title, description)


def _draw_points_by_bound(ax, points: list[SweepPoint]) -> None:
    """Points coloured by their bound: filled where the step fits, hollow where it does not."""
    for bound in sorted({p.bound for p in points}):
        chosen = [p for p in points if p.bound == bound]
        for fits, face in ((True, BOUND_COLOURS.get(bound, "#444444")), (False, "none")):
            subset = [p for p in chosen if (p.fits is not False) == fits]
            if subset:
                ax.plot([p.value for p in subset], [p.metric for p in subset], "o", markersize=4,
                        color=BOUND_COLOURS.get(bound, "#444444"), markerfacecolor=face,
                        gid=f"sweep-points-{bound}-{'fits' if fits else 'does-not-fit'}",
                        label=f"{bound}-bound" + ("" if fits else ", does not fit"))


def _draw_crossovers(ax, points: list[SweepPoint], crossovers: list[tuple[float, str]]) -> list[Label]:
    labels = []
    for index, (estimate, text) in enumerate(crossovers):
        ax.axvline(estimate, color="#888888", linestyle=(0, (4, 3)), linewidth=0.9, gid=f"crossover-{index}")
        label = ax.annotate(f"{text} at {estimate:,.4g}", (estimate, max(p.metric for p in points)), xytext=(3, -10),
                            textcoords="offset points", fontsize=7.5, bbox=LABEL_BOX, gid=f"label-crossover-{index}")
        labels.append(Label(label, [(3, -10 - 14 * k) for k in range(8)] + [(-150, -10 - 14 * k) for k in range(8)]))
    return labels


def _mark_largest_feasible(ax, points: list[SweepPoint], largest_feasible: float) -> Label:
    best = next(p for p in points if p.value == largest_feasible)
    ax.plot([best.value], [best.metric], "*", markersize=13, color="#2ca02c", markeredgecolor="black",
            gid="largest-feasible")
    label = ax.annotate(f"largest that fits: {largest_feasible:,.6g}", (best.value, best.metric), xytext=(8, 8),
                        textcoords="offset points", fontsize=8, bbox=LABEL_BOX, gid="label-largest-feasible")
    return Label(label, around(10))


@dataclass(frozen=True)
class ServingPoint:
    name: str
    per_device: float  # output tokens/s per device
    per_user: float  # output tokens/s per user
    on_frontier: bool
    ranked: int | None  # its rank among the plan's top configurations


def pareto_figure(points: list[ServingPoint], *, title: str, image_format: str,
                  min_per_user: float | None = None) -> bytes:
    """Tokens/s per device against tokens/s per user: the frontier joined, the ranked configurations numbered
    and keyed below."""
    ranked = sorted((p for p in points if p.ranked is not None), key=lambda p: p.ranked or 0)
    fig = new_figure(9, 5.8 + 0.19 * len(ranked))
    key_fraction = 0.19 * len(ranked) / fig.get_figheight()
    ax = fig.add_axes((0.1, 0.1 + key_fraction, 0.86, 0.8 - key_fraction))
    frontier = sorted((p for p in points if p.on_frontier), key=lambda p: p.per_user)
    others = [p for p in points if not p.on_frontier]
    if others:
        ax.plot([p.per_user for p in others], [p.per_device for p in others], "o", color="#bbbbbb", markersize=4,
                gid="configurations", label="other configurations")
    ax.plot([p.per_user for p in frontier], [p.per_device for p in frontier], "-o", color="#d62728", markersize=5,
            gid="pareto-frontier", label="Pareto frontier")
    labels = []
    for p in ranked:
        ax.plot([p.per_user], [p.per_device], "*", color="#5b2c83", markersize=11, markeredgecolor="black",
                gid=f"ranked-{p.ranked}")
        label = ax.annotate(str(p.ranked), (p.per_user, p.per_device), xytext=(6, 4), textcoords="offset points",
                            fontsize=8, fontweight="bold", bbox=LABEL_BOX, gid=f"label-ranked-{p.ranked}")
        labels.append(Label(label, around(8)))
    if min_per_user is not None:
        ax.axvline(min_per_user, color="#2ca02c", linestyle=(0, (4, 3)), linewidth=1, gid="slo-tpot")
        slo = ax.annotate(f"TPOT SLO: {min_per_user:,.3g} tokens/s per user and up", (min_per_user, 0), xytext=(4, 6),
                          textcoords="offset points", xycoords=("data", "axes fraction"), fontsize=7.5, color="#2ca02c",
                          bbox=LABEL_BOX, gid="label-slo-tpot")
        labels.insert(0, Label(slo, [(4, 6), (4, 20), (-200, 6)]))
    logarithmic = _spread_per_user_axis(ax, [p.per_user for p in points])
    ax.set_xlabel("Output tokens/s per user (1 / TPOT)" + (", log scale" if logarithmic else ""))
    ax.set_ylabel("Output tokens/s per device")
    ax.set_title(title, fontsize=10)
    ax.grid(True, linewidth=0.3, color="#cccccc")
    ax.legend(fontsize=7.5, loc="upper right")
    fig.canvas.draw()
    place_labels(fig, ax, labels)
    line = 0.19 / fig.get_figheight()
    for index, p in enumerate(ranked):
        fig.text(0.1, 0.02 + key_fraction - line * (index + 1), f"{p.ranked}  {p.name}: {p.per_device:,.0f} tokens/s "
                 f"per device, {p.per_user:,.1f} per user", fontsize=7.5, gid=f"key-ranked-{p.ranked}")
    description = "; ".join(f"{p.name}: {p.per_device:.4g} per device, {p.per_user:.4g} per user"
                            + (" (frontier)" if p.on_frontier else "") for p in points)
    return finished(fig, image_format, title, description)


def _spread_per_user_axis(ax, per_user: list[float]) -> bool:
    """A logarithmic per-user axis where the configurations span more than a decade: the ranked ones all sit just
    past the SLO, at the crowded low end of a linear axis, and the most interactive few stretched it tenfold."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    positive = [u for u in per_user if u > 0]
    if not positive or max(positive) < 10 * min(positive):
        return False
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    plain = ScalarFormatter()
    plain.set_scientific(False)
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(NullFormatter())
    return True
