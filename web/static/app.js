// lapse dashboard: draws the overview's charts with uPlot from the JSON in
// #charts's data-charts attribute (no inline script: see the CSP).
"use strict";
(function () {
  function width(el) { return Math.max(320, el.clientWidth || 480); }
  function bars() { return uPlot.paths.bars({ size: [0.8, 40] }); }
  function draw(id, opts, data) {
    var el = document.getElementById(id);
    if (!el) { return; }
    opts.width = width(el);
    opts.tzDate = function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); };
    opts.height = 200;
    var plot = new uPlot(opts, data, el);
    el.dataset.drawn = "1";
    window.addEventListener("resize", function () { plot.setSize({ width: width(el), height: 200 }); });
  }
  function start() {
    var holder = document.getElementById("charts");
    if (!holder || typeof uPlot === "undefined") { return; }
    var d = JSON.parse(holder.dataset.charts);
    draw("chart-due", {
      scales: { x: { time: true } },
      series: [{}, { label: "due", fill: "rgba(33,102,172,0.35)", stroke: "#2166ac", paths: bars() }]
    }, [d.due.x, d.due.y]);
    draw("chart-flow", {
      scales: { x: { time: true } },
      series: [{},
        { label: "cancelled", stroke: "#c62828" },
        { label: "paid", stroke: "#1a7f37" },
        { label: "refund required", stroke: "#e0a100" }]
    }, [d.flow.x, d.flow.cancelled, d.flow.paid, d.flow.refunds]);
    draw("chart-lateness", {
      scales: { x: { time: true } },
      series: [{}, { label: "p50 ms", stroke: "#2166ac", points: { show: true, size: 6 } }, { label: "p99 ms", stroke: "#c62828", points: { show: true, size: 6 } }]
    }, [d.lateness.x, d.lateness.p50, d.lateness.p99]);
    var labels = d.hist.labels || [];
    var xs = labels.map(function (_, i) { return i; });
    draw("chart-hist", {
      scales: { x: { time: false } },
      axes: [{ values: function (u, splits) { return splits.map(function (i) { return labels[i] || ""; }); } }, {}],
      series: [{ label: "bucket", value: function (u, i) { return i == null ? "" : (labels[i] || ""); } },
        { label: "cancels", fill: "rgba(198,40,40,0.35)", stroke: "#c62828", paths: bars() }]
    }, [xs, d.hist.n || []]);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
