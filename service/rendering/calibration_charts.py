"""A calibration's parity chart: what it expects (and the bare bound) against what was measured, one point a
measurement, on log axes around the line where the two agree."""

from __future__ import annotations

from dataclasses import dataclass

from service.rendering.figures import finished, new_figure

# Beyond this many measurements the chart draws an evenly spaced subset (its description says so): ten thousand
# markers, each with an id, make an SVG of megabytes and seconds of drawing, and show no more than two thousand do.
MAX_DRAWN = 2000


@dataclass(frozen=True)
class ParityPoint:
    measured_s: float
    expected_s: float
    bound_s: float


def _within(points: list[ParityPoint], share: float) -> int:
    return sum(abs(p.expected_s / p.measured_s - 1) <= share for p in points)


def parity_figure(points: list[ParityPoint], *, title: str, quantity: str, image_format: str) -> bytes:
    """Expected (filled) and bound (hollow, grey) against measured, log-log, with the diagonal and bands of
    ±10 % and ±25 % around it: a calibration is good where its points hug the diagonal, and a bound holds where its
    points lie on or under it."""
    drawn = points[::-(-len(points) // MAX_DRAWN)] if len(points) > MAX_DRAWN else points
    values = [v for p in drawn for v in (p.measured_s, p.expected_s, p.bound_s)]
    low, high = min(values) / 1.3, max(values) * 1.3
    fig = new_figure(6.8, 6.2)
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.fill_between([low, high], [low * 0.75, high * 0.75], [low * 1.25, high * 1.25], color="#1f77b4", alpha=0.07,
                    linewidth=0, gid="band-25", label="within 25 %")
    ax.fill_between([low, high], [low * 0.9, high * 0.9], [low * 1.1, high * 1.1], color="#1f77b4", alpha=0.15,
                    linewidth=0, gid="band-10", label="within 10 %")
    ax.plot([low, high], [low, high], color="#333333", linewidth=1, gid="parity", label="predicted = measured")
    ax.scatter([p.measured_s for p in drawn], [p.bound_s for p in drawn], s=14, marker="v", facecolors="none",
               edgecolors="#888888", linewidths=0.7, gid="bounds", label="bound")
    ax.scatter([p.measured_s for p in drawn], [p.expected_s for p in drawn], s=14, color="#d62728", gid="expected",
               label="expected")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel(f"Measured {quantity} (s)")
    ax.set_ylabel(f"Predicted {quantity} (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", linewidth=0.3, color="#dddddd")
    ax.legend(fontsize=7.5, loc="upper left")
    held = sum(p.bound_s <= p.measured_s * (1 + 1e-9) for p in points)
    description = (f"{len(points)} measurements ({len(drawn)} drawn): expected within 10 % of measured on "
                   f"{_within(points, 0.10)}, within 25 % on {_within(points, 0.25)}; the bound at or below the "
                   f"measurement on {held}")
    return finished(fig, image_format, title, description)
