"use strict";
// A roofline drawn in the browser from the API's own numbers (the analysis and the device's roofs). The explorer
// used to wait for the server's rendered chart on every change (about half a second a figure against a
// millisecond for the analysis); the figures are the same, only where they are drawn moved.
window.rooflineChart = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const WIDTH = 760, HEIGHT = 440;
  const PLOT = { left: 78, right: 742, top: 44, bottom: 384 };
  const COLOURS = { memory: "#1f77b4", compute: "#d62728" };

  function node(name, attributes, text) {
    const element = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    if (text !== undefined) element.textContent = text;
    return element;
  }

  // Three significant figures and an SI prefix; the explorer's figures use it too.
  function si(value, unit) {
    const prefixes = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    const abs = Math.abs(value);
    for (const [scale, prefix] of prefixes) if (abs >= scale) return (value / scale).toPrecision(3) + " " + prefix + unit;
    return value.toPrecision(3) + " " + unit;
  }

  function decadeBelow(value) { return Math.pow(10, Math.floor(Math.log10(value))); }
  function decadeAbove(value) { return Math.pow(10, Math.ceil(Math.log10(value))); }

  // Axes span every roof's ridge and every point, rounded out to whole decades.
  function extent(memory, computes, points) {
    const ridges = computes.map((c) => c.flops_per_s / memory.bytes_per_s);
    const xs = ridges.concat(points.map((p) => p.intensity));
    const x = [decadeBelow(Math.min(...xs) / 10), decadeAbove(Math.max(...xs) * 10)];
    const top = Math.max(...computes.map((c) => c.flops_per_s));
    const ys = points.map((p) => p.flops_per_s).concat([memory.bytes_per_s * x[0]]);
    return { x, y: [decadeBelow(Math.min(...ys)), decadeAbove(top * 1.5)] };
  }

  function scales(range) {
    const [x0, x1] = range.x.map(Math.log10), [y0, y1] = range.y.map(Math.log10);
    return {
      x: (v) => PLOT.left + (Math.log10(v) - x0) / (x1 - x0) * (PLOT.right - PLOT.left),
      y: (v) => PLOT.bottom - (Math.log10(v) - y0) / (y1 - y0) * (PLOT.bottom - PLOT.top),
    };
  }

  function axes(svg, range, at) {
    const group = node("g", { class: "axes", "font-size": 11, fill: "#333" });
    group.append(node("rect", { x: PLOT.left, y: PLOT.top, width: PLOT.right - PLOT.left, height: PLOT.bottom - PLOT.top,
                                fill: "none", stroke: "#999" }));
    for (let v = range.x[0]; v <= range.x[1] * 1.0001; v *= 10) {
      group.append(node("line", { x1: at.x(v), x2: at.x(v), y1: PLOT.top, y2: PLOT.bottom, stroke: "#eee" }));
      group.append(node("text", { x: at.x(v), y: PLOT.bottom + 16, "text-anchor": "middle" }, v >= 1 ? v.toLocaleString("en") : String(v)));
    }
    for (let v = range.y[0]; v <= range.y[1] * 1.0001; v *= 10) {
      group.append(node("line", { x1: PLOT.left, x2: PLOT.right, y1: at.y(v), y2: at.y(v), stroke: "#eee" }));
      group.append(node("text", { x: PLOT.left - 6, y: at.y(v) + 4, "text-anchor": "end" }, si(v, "FLOP/s")));
    }
    group.append(node("text", { x: (PLOT.left + PLOT.right) / 2, y: HEIGHT - 14, "text-anchor": "middle" },
                      "arithmetic intensity (FLOP per HBM byte)"));
    svg.append(group);
  }

  function roofs(svg, memory, computes, range, at) {
    const group = node("g", { class: "roofs", "font-size": 11 });
    const highest = Math.max(...computes.map((c) => c.flops_per_s));
    const slantEnd = highest / memory.bytes_per_s;
    group.append(node("line", { x1: at.x(range.x[0]), y1: at.y(memory.bytes_per_s * range.x[0]), x2: at.x(slantEnd),
                                y2: at.y(highest), stroke: "#333", "stroke-width": 2, "data-roof": memory.label }));
    // The bandwidth's label runs along its slope, low on the left where no compute roof sits.
    const angle = Math.atan2(at.y(highest) - at.y(memory.bytes_per_s * range.x[0]), at.x(slantEnd) - at.x(range.x[0])) * 180 / Math.PI;
    const lx = at.x(range.x[0]) + 24, ly = at.y(memory.bytes_per_s * range.x[0]) + (24 * Math.tan(angle * Math.PI / 180)) - 6;
    group.append(node("text", { x: lx, y: ly, transform: `rotate(${angle.toFixed(2)} ${lx} ${ly})`, class: "roof-label" },
                      memory.label + " " + si(memory.bytes_per_s, "B/s") + " (" + memory.source + ")"));
    computes.slice().sort((a, b) => b.flops_per_s - a.flops_per_s).forEach((c) => {
      const ridge = c.flops_per_s / memory.bytes_per_s;
      group.append(node("line", { x1: at.x(ridge), y1: at.y(c.flops_per_s), x2: at.x(range.x[1]), y2: at.y(c.flops_per_s),
                                  stroke: "#333", "stroke-width": 2, "stroke-dasharray": c.flops_per_s === highest ? "" : "6 3",
                                  "data-roof": c.label }));
      // The top roof's label above its line, the others' below theirs: two peaks a factor of two apart are
      // closer on the axis than two lines of text.
      const y = at.y(c.flops_per_s) + (c.flops_per_s === highest ? -5 : 14);
      group.append(node("text", { x: PLOT.right - 4, y, "text-anchor": "end", class: "roof-label" },
                        c.label + " " + si(c.flops_per_s, "FLOP/s") + " (" + c.source + ")"));
    });
    svg.append(group);
  }

  function points(svg, list, at) {
    const group = node("g", { class: "points" });
    for (const p of list.slice().sort((a, b) => b.share - a.share)) {
      const circle = node("circle", { cx: at.x(p.intensity).toFixed(2), cy: at.y(p.flops_per_s).toFixed(2),
                                      r: (3 + 14 * Math.sqrt(p.share)).toFixed(2), fill: COLOURS[p.bound] || "#555",
                                      "fill-opacity": 0.55, stroke: "#222", "stroke-width": 0.6,
                                      "data-name": p.name, "data-intensity": p.intensity, "data-flops-per-s": p.flops_per_s });
      circle.append(node("title", {}, p.name + ": " + p.intensity.toPrecision(4) + " FLOP/byte, " +
                                      si(p.flops_per_s, "FLOP/s") + ", " + p.bound + "-bound, " +
                                      (100 * p.share).toFixed(1) + " % of the time"));
      group.append(circle);
    }
    svg.append(group);
  }

  function legend(svg) {
    const group = node("g", { class: "legend", "font-size": 11 });
    [["memory-bound", COLOURS.memory], ["compute-bound", COLOURS.compute]].forEach(([text, colour], i) => {
      group.append(node("circle", { cx: PLOT.left + 12 + i * 120, cy: PLOT.top - 10, r: 5, fill: colour, "fill-opacity": 0.55 }));
      group.append(node("text", { x: PLOT.left + 22 + i * 120, y: PLOT.top - 6 }, text));
    });
    svg.append(group);
  }

  // memory: {label, bytes_per_s, source}; computes: [{label, flops_per_s, source}]; shown: [{name, intensity,
  // flops_per_s, share, bound}] with positive intensity and FLOP/s (a log axis has no place for zero).
  function draw({ title, memory, computes, shown }) {
    const svg = node("svg", { xmlns: NS, viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img" });
    svg.append(node("title", {}, title));
    svg.append(node("text", { x: WIDTH / 2, y: 18, "text-anchor": "middle", "font-size": 13, "font-weight": 600 }, title));
    const range = extent(memory, computes, shown);
    const at = scales(range);
    axes(svg, range, at);
    roofs(svg, memory, computes, range, at);
    points(svg, shown, at);
    legend(svg);
    return svg;
  }

  return { draw, si };
})();
