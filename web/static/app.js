// lapse dashboard: draws the overview's charts with uPlot from the JSON in
// #charts's data-charts attribute, and refreshes the overview in place
// (no inline script: see the CSP).
"use strict";
(function () {
  var plots = {};   // chart id → its uPlot, kept so a refresh only sets data
  var labels = [];  // the lateness histogram's bucket labels, of the last data

  function width(el) { return Math.max(320, el.clientWidth || 480); }
  function bars() { return uPlot.paths.bars({ size: [0.8, 40] }); }
  function draw(id, opts, data) {
    var el = document.getElementById(id);
    if (!el) { return; }
    if (plots[id]) { plots[id].setData(data); return; }
    opts.width = width(el);
    opts.tzDate = function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); };
    opts.height = 200;
    var plot = new uPlot(opts, data, el);
    plots[id] = plot;
    el.dataset.drawn = "1";
    window.addEventListener("resize", function () { plot.setSize({ width: width(el), height: 200 }); });
  }
  function charts(d) {
    if (typeof uPlot === "undefined") { return; }
    draw("chart-due", {
      scales: { x: { time: true } },
      series: [{}, { label: "due", fill: "rgba(33,102,172,0.35)", stroke: "#2166ac", paths: bars() }]
    }, [d.due.x, d.due.y]);
    draw("chart-flow", {
      scales: { x: { time: true } },
      series: [{},
        { label: "cancelled", stroke: "#c62828" },
        { label: "paid", stroke: "#1a7f37" },
        { label: "refunds (owed or given back)", stroke: "#e0a100" }]
    }, [d.flow.x, d.flow.cancelled, d.flow.paid, d.flow.refunds]);
    draw("chart-lateness", {
      scales: { x: { time: true } },
      series: [{}, { label: "p50 ms", stroke: "#2166ac", points: { show: true, size: 6 } }, { label: "p99 ms", stroke: "#c62828", points: { show: true, size: 6 } }]
    }, [d.lateness.x, d.lateness.p50, d.lateness.p99]);
    labels = d.hist.labels || [];
    var xs = labels.map(function (_, i) { return i; });
    draw("chart-hist", {
      scales: { x: { time: false } },
      axes: [{ values: function (u, splits) { return splits.map(function (i) { return labels[i] || ""; }); } }, {}],
      series: [{ label: "bucket", value: function (u, i) { return i == null ? "" : (labels[i] || ""); } },
        { label: "cancels", fill: "rgba(198,40,40,0.35)", stroke: "#c62828", paths: bars() }]
    }, [xs, d.hist.n || []]);
  }

  // Auto-refresh: every data-refresh-ms the overview's content is fetched
  // again as a fragment (?fragment=live, rendered by the server like the
  // page) and its data-live parts and chart data are swapped in: no reload,
  // the scroll stays. The pause is kept in localStorage, so it holds across
  // reloads. #refresh counts its ticks and refreshes (data-ticks,
  // data-refreshes): a test waits on them instead of on the clock.
  var pausedKey = "lapse.overview.paused";
  function paused() {
    try { return window.localStorage.getItem(pausedKey) === "1"; } catch (e) { return false; }
  }
  function setPaused(p) {
    try {
      if (p) { window.localStorage.setItem(pausedKey, "1"); } else { window.localStorage.removeItem(pausedKey); }
    } catch (e) { /* storage refused: the pause lasts for this page only */ }
  }
  function autoRefresh() {
    var box = document.getElementById("refresh");
    var toggle = document.getElementById("refresh-toggle");
    var state = document.getElementById("refresh-state");
    if (!box || !toggle || !state) { return; }
    var every = parseInt(box.dataset.refreshMs, 10);
    if (!(every > 0)) { return; }
    var stopped = false;  // a fetch failed (the session ended): reload to go on
    var busy = false;
    var pausedHere = paused();
    var stamp = state.textContent;
    function show() {
      toggle.textContent = pausedHere ? "Resume auto-refresh" : "Pause auto-refresh";
      toggle.setAttribute("aria-pressed", pausedHere ? "true" : "false");
      box.dataset.paused = pausedHere ? "1" : "0";
      state.textContent = stopped ? "auto-refresh stopped: reload the page" : (pausedHere ? "auto-refresh paused · " : "auto-refresh every " + every / 1000 + " s · ") + stamp;
    }
    function count(name) { box.dataset[name] = String((parseInt(box.dataset[name], 10) || 0) + 1); }
    function swap(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      document.querySelectorAll("[data-live]").forEach(function (el) {
        var fresh = doc.getElementById(el.id);
        if (fresh) { el.replaceWith(document.adoptNode(fresh)); }
      });
      var holder = doc.getElementById("charts");
      if (holder) {
        document.getElementById("charts").dataset.charts = holder.dataset.charts;
        charts(JSON.parse(holder.dataset.charts));
      }
      var freshState = doc.getElementById("refresh-state");
      if (freshState) { stamp = freshState.textContent; }
    }
    function tick() {
      count("ticks");
      if (pausedHere || stopped || busy || document.hidden) { return; }
      busy = true;
      fetch(window.location.pathname + "?fragment=live", { credentials: "same-origin", redirect: "error", headers: { "Accept": "text/html" } })
        .then(function (res) {
          if (!res.ok) { throw new Error("HTTP " + res.status); }
          return res.text();
        })
        .then(function (html) {
          if (pausedHere) { return; }  // paused while it was on its way
          swap(html);
          count("refreshes");
        })
        .catch(function () { stopped = true; })
        .then(function () { busy = false; show(); });
    }
    toggle.addEventListener("click", function () {
      pausedHere = !pausedHere;
      setPaused(pausedHere);
      show();
      if (!pausedHere) { tick(); }
    });
    // Another tab paused or resumed: follow it.
    window.addEventListener("storage", function (ev) {
      if (ev.key === pausedKey) { pausedHere = paused(); show(); }
    });
    toggle.hidden = false;
    show();
    window.setInterval(tick, every);
  }

  function start() {
    var holder = document.getElementById("charts");
    if (holder) { charts(JSON.parse(holder.dataset.charts)); }
    autoRefresh();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
