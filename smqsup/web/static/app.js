/* smqsup web UI: the WebSocket client, small canvas line charts, the tables
   and the dead-letter actions (helpers: ui.js; message browser and pausing:
   messages.js).

   Data flow: the server sends {"type": "history"} once per connection (every
   queue's per-second points of the last 10 minutes), then {"type": "snapshot"}
   every second. Points hold cumulative counters and sizes; rates are the
   differences of consecutive points, so history and live points join into one
   series. Every value from the server reaches the page through textContent or
   an attribute, never as HTML. */
"use strict";
(function () {
  const WINDOW_MS = 10 * 60 * 1000;
  const GAP_MS = 15000; // a longer silence breaks a line
  const EVENTS = [["published", "published"], ["acked", "acked"], ["retried", "retried"],
    ["dead_lettered", "dead-lettered"]];
  const SIZES = ["pending", "processing", "scheduled", "delayed", "dead"];
  /** How the page names a size: "delayed" holds retries waiting. */
  const SIZE_LABELS = {delayed: "retrying"};
  const sizeLabel = (key) => SIZE_LABELS[key] || key;
  /** Counters shown as totals only (no chart). */
  const MORE_COUNTERS = ["expired", "deduplicated", "rejected", "removed"];
  const COLORS = {published: "#2f6fde", acked: "#2c8a4b", retried: "#b7791f", dead_lettered: "#c73a3a",
    pending: "#2f6fde", processing: "#7b4fd6", scheduled: "#0f8a8a", delayed: "#b7791f", dead: "#c73a3a"};
  const PALETTE = ["#2f6fde", "#2c8a4b", "#c73a3a", "#b7791f", "#7b4fd6", "#0f8a8a", "#d1497b", "#5b6b7f",
    "#8a6d0f", "#3d9be9"];
  const DEAD_LIMIT = 100;
  const BODY_CHARS = 2000;

  const {el, cell, $, isNum, fmtInt, fmtRate, fmtPct, fmtMiB, fmtTime, fmtDate, apiPath, getJSON, postJSON,
    toast} = window.SMQ;

  /** Messages in flight of the most at once, "37/50"; "–" for an unknown part, and for both. */
  function flight(inFlight, concurrency) {
    return isNum(inFlight) || isNum(concurrency) ? fmtInt(inFlight) + "/" + fmtInt(concurrency) : "–";
  }

  /** A queue's or the totals' flight(): "–" when no consumer reports its concurrency. */
  function summedFlight(part) { return part.concurrency > 0 ? flight(part.in_flight, part.concurrency) : "–"; }

  /** A lag in seconds, "12.3 s"; "–" when unknown. */
  function fmtLag(v) { return isNum(v) ? v.toFixed(1) + " s" : "–"; }

  /** Size cells (in SIZES' order) with the lag's after the first (pending). */
  function withLag(sizeCells, lagCell) { return [sizeCells[0], lagCell, ...sizeCells.slice(1)]; }

  /** "scaled up 2→3 12 s ago (why)": a supervisor's last scale event, as text. */
  function scaledText(e, now) {
    const way = e.to > e.from ? "up " : e.to < e.from ? "down " : "";
    const age = isNum(e.at_ms) && isNum(now) ? " " + Math.max(0, Math.round((now - e.at_ms) / 1000)) + " s ago" : "";
    return "scaled " + way + e.from + "→" + e.to + age + (e.why ? " (" + e.why + ")" : "");
  }

  /** One supervisor of a queue: its target (of min..max when autoscaled), where it runs them and how many
      run, a "rolling" or "roll failed: …" marker, its last scale event. Text only. */
  function supervisorLine(s, now) {
    const target = fmtInt(s.target) + (s.autoscaled ? " of " + fmtInt(s.min) + ".." + fmtInt(s.max) : "");
    const roll = s.roll_failed != null
      ? el("span", {className: "badge bad", text: "roll failed: " + s.roll_failed, dataset: {testid: "roll-failed"}})
      : s.rolling ? el("span", {className: "badge", text: "rolling", dataset: {testid: "rolling"}}) : "";
    return el("div", {dataset: {testid: "supervisor", supervisor: s.host + ":" + s.pid}}, [
      el("span", {text: target, dataset: {testid: "target"}}),
      el("span", {className: "hint", text: " on " + s.host + ":" + s.pid + " (" + fmtInt(s.running) + " running)"}),
      roll, s.scaled ? el("div", {className: "hint", text: scaledText(s.scaled, now), dataset: {testid: "scaled"}}) : ""]);
  }

  /** A queue's supervisors cell: a line each (supervisorLine), "–" with none. */
  function supervisorsCell(q, now) {
    const sups = Array.isArray(q.supervisors) ? q.supervisors : [];
    if (!sups.length) return cell("–", {dataset: {testid: "supervisors"}});
    return el("td", {className: "supervisors", dataset: {testid: "supervisors"}}, sups.map((s) => supervisorLine(s, now)));
  }

  function collector(token) {
    // Owner tokens are host:pid:random; people want host:pid.
    return token ? token.split(":").slice(0, -1).join(":") || token : "–";
  }

  // --- charts -----------------------------------------------------------------

  function niceStep(raw, integer) {
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const steps = integer ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
    const step = steps.find((s) => raw <= s * mag) * mag;
    return integer ? Math.max(1, Math.round(step)) : step;
  }

  /** A line chart on a canvas: time on x (the last 10 minutes), values on y,
      an HTML legend (the canvas's next sibling) with each series' last value. */
  class LineChart {
    constructor(canvas, opts) {
      this.canvas = canvas;
      this.legend = canvas.nextElementSibling;
      this.format = opts.format;
      this.integer = !!opts.integer;
      this.series = [];
      this.legendKey = "";
    }

    set(series) { this.series = series; }

    draw(now) {
      const c = this.canvas;
      const dpr = window.devicePixelRatio || 1;
      const w = c.clientWidth, h = c.clientHeight;
      if (!w || !h || !now) return;
      if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
        c.width = Math.round(w * dpr);
        c.height = Math.round(h * dpr);
      }
      const ctx = c.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      const L = 58, R = 12, T = 8, B = 20, pw = w - L - R, ph = h - T - B;
      const t0 = now - WINDOW_MS;
      let max = 0, count = 0, lastT = 0;
      const last = {};
      for (const s of this.series) {
        for (const [t, v] of s.points) {
          if (t < t0 || !isNum(v)) continue;
          max = Math.max(max, v);
          count++;
          lastT = Math.max(lastT, t);
          last[s.name] = v;
        }
      }
      const step = niceStep((max > 0 ? max : 1) / 4, this.integer);
      const ymax = Math.max(step, Math.ceil((max > 0 ? max : 1) / step) * step);
      const X = (t) => L + (t - t0) / WINDOW_MS * pw;
      const Y = (v) => T + ph - v / ymax * ph;

      ctx.font = "11px system-ui, sans-serif";
      ctx.lineWidth = 1;
      ctx.strokeStyle = "#e6e9ef";
      ctx.fillStyle = "#687083";
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      for (let v = 0; v <= ymax + step / 2; v += step) {
        const y = Math.round(Y(v)) + 0.5;
        ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(L + pw, y); ctx.stroke();
        ctx.fillText(this.format(v), L - 6, y);
      }
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      const tick = 2 * 60 * 1000;
      for (let t = Math.ceil(t0 / tick) * tick; t <= now; t += tick) {
        const x = Math.round(X(t)) + 0.5;
        ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, T + ph); ctx.stroke();
        ctx.fillText(fmtTime(t, false), x, T + ph + 5);
      }
      ctx.strokeStyle = "#9aa2b1";
      ctx.beginPath(); ctx.moveTo(L + 0.5, T); ctx.lineTo(L + 0.5, T + ph + 0.5); ctx.lineTo(L + pw, T + ph + 0.5);
      ctx.stroke();

      ctx.save();
      ctx.beginPath(); ctx.rect(L, T - 2, pw, ph + 4); ctx.clip();
      ctx.lineWidth = 1.6;
      ctx.lineJoin = "round";
      for (const s of this.series) {
        ctx.strokeStyle = s.color;
        ctx.beginPath();
        let prev = null;
        for (const [t, v] of s.points) {
          if (t < t0 - 2000 || !isNum(v)) { prev = null; continue; }
          if (prev === null || t - prev > GAP_MS) ctx.moveTo(X(t), Y(v)); else ctx.lineTo(X(t), Y(v));
          prev = t;
        }
        ctx.stroke();
      }
      ctx.restore();
      if (!count) {
        ctx.fillStyle = "#9aa2b1";
        ctx.textAlign = "center";
        ctx.textBaseline = "middle";
        ctx.fillText("no data yet", L + pw / 2, T + ph / 2);
      }
      c.dataset.points = String(count);
      c.dataset.lastT = String(lastT);
      c.dataset.last = JSON.stringify(last);
      this.drawLegend(last);
    }

    drawLegend(last) {
      const key = this.series.map((s) => s.name + "\u0000" + s.color).join("\u0001");
      if (key !== this.legendKey) {
        this.legendKey = key;
        this.legend.replaceChildren(...this.series.map((s) => {
          const swatch = el("span", {className: "swatch"});
          swatch.style.background = s.color;
          return el("li", {dataset: {series: s.name}}, [swatch, el("span", {text: s.name}), el("span", {className: "val"})]);
        }));
      }
      this.series.forEach((s, i) => {
        this.legend.children[i].querySelector(".val").textContent = s.name in last ? this.format(last[s.name]) : "–";
      });
    }
  }

  /** An axis or legend number: three significant digits, no trailing zeros. */
  function short(v) { return v >= 100 ? v.toFixed(0) : String(Number(v.toPrecision(3))); }
  const formats = {
    rate: (v) => short(v) + "/s",
    count: (v) => fmtInt(v),
    pct: (v) => short(v) + "%",
    mib: (v) => short(v) + " MiB",
  };

  // --- state ------------------------------------------------------------------

  const S = {
    queues: new Map(), // name -> {points, snap, card, charts}
    consumers: new Map(), // consumer id -> {label, color, cpu, rss, seen}
    colorNext: 0,
    snapshots: 0,
    now: 0,
    deadKeys: new Map(), // queue -> "dead/dead_lettered" last loaded
    deadSeq: new Map(),
  };
  const charts = {
    totalRates: new LineChart($("chart-total-rates"), {format: formats.rate}),
    totalSizes: new LineChart($("chart-total-sizes"), {format: formats.count, integer: true}),
    cpu: new LineChart($("chart-cpu"), {format: formats.pct}),
    rss: new LineChart($("chart-rss"), {format: formats.mib}),
  };

  function queueState(name) {
    let q = S.queues.get(name);
    if (!q) {
      q = {points: [], snap: null, card: null, charts: null};
      S.queues.set(name, q);
    }
    return q;
  }

  function trim(points, now, at) {
    const cut = now - WINDOW_MS - 60000;
    let i = 0;
    while (i < points.length && at(points[i]) < cut) i++;
    if (i) points.splice(0, i);
  }

  /** [[t, rate per second]] of one counter from consecutive points. */
  function rateSeries(points, key) {
    const out = [];
    for (let i = 1; i < points.length; i++) {
      const a = points[i - 1], b = points[i];
      const dt = b.t - a.t;
      if (dt <= 0) continue;
      if (dt > GAP_MS) { out.push([b.t, null]); continue; }
      out.push([b.t, Math.max(0, (b[key] || 0) - (a[key] || 0)) / (dt / 1000)]);
    }
    return out;
  }

  function valueSeries(points, key) { return points.map((p) => [p.t, isNum(p[key]) ? p[key] : null]); }

  /** The sum of several series, per second; a series with no point in a
      second counts with its value of up to 3 s before. */
  function sumSeries(list) {
    const maps = list.map((pts) => new Map(pts.map(([t, v]) => [Math.round(t / 1000), v])));
    const seconds = [...new Set(maps.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
    return seconds.map((k) => {
      let sum = 0, any = false;
      for (const m of maps) {
        for (let d = 0; d <= 3; d++) {
          if (!m.has(k - d)) continue;
          const v = m.get(k - d);
          if (isNum(v)) { sum += v; any = true; }
          break;
        }
      }
      return [k * 1000, any ? sum : null];
    });
  }

  const lastOf = (series) => {
    for (let i = series.length - 1; i >= 0; i--) if (isNum(series[i][1])) return series[i][1];
    return null;
  };

  // --- messages from the server ----------------------------------------------

  function onHistory(msg) {
    for (const [name, points] of Object.entries(msg.queues || {})) {
      queueState(name).points = points.filter((p) => isNum(p.t));
      for (const p of points) S.now = Math.max(S.now, p.t || 0);
    }
    ensureCards();
    scheduleDraw();
  }

  function onSnapshot(snap) {
    S.snapshots++;
    S.now = snap.t;
    document.body.dataset.snapshots = String(S.snapshots);
    document.body.dataset.lastT = String(snap.t);
    $("updated").textContent = fmtTime(snap.t);
    $("updated").dateTime = new Date(snap.t).toISOString();
    for (const [name, qs] of Object.entries(snap.queues)) {
      const q = queueState(name);
      q.snap = qs;
      const lastPoint = q.points[q.points.length - 1];
      if (!lastPoint || snap.t > lastPoint.t + 200) {
        q.points.push(Object.assign({t: snap.t, consumers: qs.consumers.length}, qs.counters, qs.sizes));
      }
      trim(q.points, snap.t, (p) => p.t);
      for (const c of qs.consumers) {
        let cs = S.consumers.get(c.id);
        if (!cs) {
          cs = {color: PALETTE[S.colorNext++ % PALETTE.length], cpu: [], rss: []};
          S.consumers.set(c.id, cs);
        }
        cs.label = name + " #" + (c.index ?? "?") + " pid " + (c.pid ?? "?");
        cs.seen = snap.t;
        cs.cpu.push([snap.t, isNum(c.cpu) ? c.cpu : null]);
        cs.rss.push([snap.t, isNum(c.rss) ? c.rss / 1048576 : null]);
        trim(cs.cpu, snap.t, (p) => p[0]);
        trim(cs.rss, snap.t, (p) => p[0]);
      }
    }
    for (const [id, cs] of S.consumers) if (snap.t - cs.seen > WINDOW_MS) S.consumers.delete(id);
    ensureCards();
    renderGroups(snap);
    renderQueues(snap);
    renderConsumers(snap);
    renderProducers(snap);
    renderSchedules(snap);
    checkDead(snap);
    window.SMQ.messages.update(snap);
    scheduleDraw();
  }

  // --- charts and tables ------------------------------------------------------

  function ensureCards() {
    const box = $("queue-charts");
    const names = [...S.queues.keys()].sort();
    for (const name of names) {
      const q = S.queues.get(name);
      if (q.card) continue;
      const rates = el("canvas", {dataset: {testid: "chart-queue-rates", queue: name}});
      const sizes = el("canvas", {dataset: {testid: "chart-queue-sizes", queue: name}});
      q.card = el("div", {className: "queue-card", dataset: {testid: "queue-card", queue: name}}, [
        el("h3", {text: name}),
        el("div", {className: "charts"}, [
          el("figure", {className: "chart"}, [el("figcaption", {text: "Messages per second"}), rates,
            el("ul", {className: "legend"})]),
          el("figure", {className: "chart"}, [el("figcaption", {text: "Messages in the queue"}), sizes,
            el("ul", {className: "legend"})]),
        ]),
        q.groupsBox = el("div", {className: "groups", dataset: {testid: "queue-groups", queue: name}}),
      ]);
      q.charts = {rates: new LineChart(rates, {format: formats.rate}),
        sizes: new LineChart(sizes, {format: formats.count, integer: true})};
    }
    const cards = names.map((n) => S.queues.get(n).card);
    if (cards.some((c, i) => box.children[i] !== c)) box.replaceChildren(...cards);
  }

  /** Each queue card's busiest message groups: waiting and running counts (nothing without groups). */
  function renderGroups(snap) {
    for (const [name, qs] of Object.entries(snap.queues)) {
      const box = S.queues.get(name).groupsBox;
      const groups = qs.groups || {};
      const busiest = groups.busiest || [];
      if (!box) continue;
      if (!groups.waiting && !busiest.length) { box.replaceChildren(); continue; }
      const rows = busiest.map((g) => el("tr", {dataset: {testid: "group-row", group: String(g.group)}}, [
        el("td", {text: g.group}), el("td", {className: "num", text: fmtInt(g.ready)}),
        el("td", {className: "num", text: fmtInt(g.running)})]));
      box.replaceChildren(
        el("h4", {text: "Busiest groups (" + fmtInt(groups.waiting) + " with messages waiting)"}),
        el("table", {}, [el("thead", {}, [el("tr", {}, [el("th", {text: "group"}), el("th", {text: "waiting"}),
          el("th", {text: "running"})])]), el("tbody", {}, rows)]));
    }
  }

  let drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; drawAll(); });
  }

  function drawAll() {
    const queues = [...S.queues.values()];
    const totalRates = EVENTS.map(([key, label]) => ({name: label, color: COLORS[key],
      points: sumSeries(queues.map((q) => rateSeries(q.points, key)))}));
    charts.totalRates.set(totalRates);
    charts.totalSizes.set(SIZES.map((key) => ({name: sizeLabel(key), color: COLORS[key],
      points: sumSeries(queues.map((q) => valueSeries(q.points, key)))})));
    const consumers = [...S.consumers.values()].sort((a, b) => a.label.localeCompare(b.label));
    charts.cpu.set(consumers.map((c) => ({name: c.label, color: c.color, points: c.cpu})));
    charts.rss.set(consumers.map((c) => ({name: c.label, color: c.color, points: c.rss})));
    for (const chart of Object.values(charts)) chart.draw(S.now);
    for (const q of queues) {
      if (!q.charts) continue;
      q.charts.rates.set(EVENTS.map(([key, label]) => ({name: label, color: COLORS[key],
        points: rateSeries(q.points, key)})));
      q.charts.sizes.set(SIZES.map((key) => ({name: sizeLabel(key), color: COLORS[key],
        points: valueSeries(q.points, key)})));
      q.charts.rates.draw(S.now);
      q.charts.sizes.draw(S.now);
    }
    renderTiles(totalRates);
  }

  function renderTiles(totalRates) {
    const snap = S.lastSnap;
    if (!snap) return;
    const t = snap.totals;
    const rateOf = Object.fromEntries(EVENTS.map(([key], i) => [key, lastOf(totalRates[i].points)]));
    // [key, label, value, the small text under the value]
    const tiles = [
      ...EVENTS.map(([key, label]) => [key, label, t[key], fmtRate(rateOf[key]) + "/s"]),
      ...SIZES.map((key) => [key, sizeLabel(key), t[key], ""]),
      ["consumers", "consumers", t.consumers, ""],
      ["in_flight", "in flight", t.in_flight, t.concurrency > 0 ? "of " + fmtInt(t.concurrency) : ""],
      ...MORE_COUNTERS.map((key) => [key, key, t[key], ""]),
    ];
    $("tiles").replaceChildren(...tiles.map(([key, label, value, note]) =>
      el("div", {className: "tile"}, [
        el("span", {className: "label", text: label}),
        el("span", {className: "value", text: fmtInt(value), dataset: {testid: "total-" + key, value: value}}),
        note ? el("span", {className: "rate", text: note}) : "",
      ])));
  }

  /** Badges for a queue's outbox entries set aside and its group keys of the wrong type (title: why). */
  function troubleBadges(q) {
    const parked = Array.isArray(q.outbox_parked) ? q.outbox_parked : [];
    const wrong = Array.isArray(q.wrong_type_keys) ? q.wrong_type_keys : [];
    const out = [];
    if (parked.length) {
      out.push(el("span", {className: "badge bad", text: `outbox: ${parked.reduce((n, p) => n + (p.entries || 0), 0)} set aside`,
        title: parked.map((p) => `${p.kind} of ${p.target_queue} (${p.failures} failures): ${p.reason}`).join("\n"),
        dataset: {testid: "outbox-parked"}}));
    }
    if (wrong.length) {
      out.push(el("span", {className: "badge bad", text: "key of the wrong type", title: wrong.join("\n"),
        dataset: {testid: "wrong-type-keys"}}));
    }
    return out;
  }

  function renderQueues(snap) {
    S.lastSnap = snap;
    const rows = Object.entries(snap.queues).sort(([a], [b]) => a.localeCompare(b)).map(([name, q]) => {
      const pts = S.queues.get(name).points;
      const rate = (key) => isNum(q.rates[key]) ? q.rates[key] : lastOf(rateSeries(pts.slice(-11), key));
      const restarts = Object.values(q.slots || {}).reduce((n, s) => n + (s.restarts || 0), 0);
      return el("tr", {dataset: {testid: "queue-row", queue: name, paused: q.paused ? "true" : "false"}}, [
        el("td", {}, [name, q.partitions > 1 ? el("span", {className: "badge", text: `${q.partitions} partitions`,
          dataset: {testid: "partitions"}}) : "", q.paused ? el("span", {className: "badge", text: "paused",
          dataset: {testid: "paused"}}) : "", ...troubleBadges(q)]),
        ...withLag(SIZES.map((k) => cell(fmtInt(q.sizes[k]))), cell(fmtLag(q.lag_s), {dataset: {testid: "lag"}})),
        ...EVENTS.map(([k]) => cell(fmtRate(rate(k)))),
        cell(String(q.consumers.length)), supervisorsCell(q, snap.t),
        cell(summedFlight(q), {dataset: {testid: "in-flight"}}),
        cell(collector(q.leader), {dataset: {testid: "leader"}}),
        cell(String(restarts)), el("td", {}, [window.SMQ.messages.pauseButton(name, q.paused)]),
      ]);
    });
    const t = snap.totals;
    rows.push(el("tr", {}, [cell("total", {className: "total"}),
      ...withLag(SIZES.map((k) => cell(fmtInt(t[k]), {className: "total"})),
        cell(fmtLag(t.lag_s), {className: "total", dataset: {testid: "total-lag"}})),
      ...EVENTS.map(([k]) => cell(fmtRate(t.rates[k]), {className: "total"})), cell(String(t.consumers), {className: "total"}),
      cell(""), cell(summedFlight(t), {className: "total", dataset: {testid: "total-in-flight"}}), cell(""), cell(""),
      cell("")]));
    $("queue-rows").replaceChildren(...rows);
  }

  function renderConsumers(snap) {
    const rows = [];
    for (const [name, q] of Object.entries(snap.queues).sort(([a], [b]) => a.localeCompare(b))) {
      for (const c of q.consumers) {
        const age = c.heartbeat_age_s;
        rows.push(el("tr", {dataset: {testid: "consumer-row", id: c.id, queue: name, cpu: c.cpu, rss: c.rss}}, [
          cell(name), cell(c.index ?? "?"), cell(c.host ?? "?"), cell(c.pid ?? "?"),
          cell(c.busy ? "busy" : "idle", {className: c.busy ? "state-busy" : "state-idle"}),
          cell(flight(c.in_flight, c.concurrency), {dataset: {testid: "in-flight"}}),
          cell(fmtInt(c.received)), cell(fmtRate(c.rate)), cell(fmtPct(c.cpu), {dataset: {testid: "cpu"}}),
          cell(fmtMiB(c.rss), {dataset: {testid: "rss"}}), cell(fmtMiB(c.uss)),
          cell(isNum(age) ? age.toFixed(1) + " s ago" : "–", {className: isNum(age) && age > 5 ? "stale" : ""}),
        ]));
      }
    }
    if (!rows.length) rows.push(el("tr", {}, [el("td", {colspan: 12, className: "empty", text: "No consumers registered."})]));
    $("consumer-rows").replaceChildren(...rows);
  }

  function renderProducers(snap) {
    const rows = (snap.producers || []).map((p) => el("tr", {dataset: {testid: "producer-row"}}, [
      cell(p.id), cell(fmtInt(p.published)), cell(fmtRate(p.rate)),
      cell(isNum(p.seen_at_ms) ? ((snap.t - p.seen_at_ms) / 1000).toFixed(0) + " s ago" : "–"),
    ]));
    if (!rows.length) rows.push(el("tr", {}, [el("td", {colspan: 4, className: "empty", text: "No producers seen."})]));
    $("producer-rows").replaceChildren(...rows);
  }

  /** cron EXPR or every Ns, from a schedule row. */
  function scheduleWhen(s) {
    if (typeof s.cron === "string") return "cron " + s.cron;
    if (!isNum(s.every_s)) return "–";
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
      if (s.every_s % size === 0) return "every " + s.every_s / size + unit;
    }
    return "every " + Math.round(s.every_s * 1000) + "ms";
  }

  function renderSchedules(snap) {
    const when = (seconds) => isNum(seconds) ? fmtDate(seconds * 1000) : "–";
    const rows = (snap.schedules || []).map((s) => {
      const state = s.error ? "unusable" : s.paused ? "paused" : s.declarers > 0 ? "active" : "not declared";
      return el("tr", {dataset: {testid: "schedule-row", name: s.name, queue: s.queue}}, [
        cell(s.name), cell(s.queue), cell(scheduleWhen(s)), cell(s.timezone ?? "–"),
        cell(state, {title: s.error || "", dataset: {testid: "schedule-state"}}),
        cell(when(s.last_fire), {dataset: {testid: "last-fire"}}),
        cell(when(s.next_fire), {dataset: {testid: "next-fire"}}),
        cell(fmtInt(s.declarers)), cell(fmtInt(s.fires)),
      ]);
    });
    if (!rows.length) rows.push(el("tr", {}, [el("td", {colspan: 9, className: "empty", text: "No schedules."})]));
    $("schedule-rows").replaceChildren(...rows);
  }

  // --- dead letters -----------------------------------------------------------

  function checkDead(snap) {
    for (const [name, q] of Object.entries(snap.queues)) {
      const key = q.sizes.dead + "/" + q.counters.dead_lettered;
      if (S.deadKeys.get(name) !== key) {
        S.deadKeys.set(name, key);
        loadDead(name);
      }
    }
  }

  async function loadDead(name) {
    const seq = (S.deadSeq.get(name) || 0) + 1;
    S.deadSeq.set(name, seq);
    let data;
    try {
      data = await getJSON(apiPath(name, "dead?limit=" + DEAD_LIMIT));
    } catch (err) {
      S.deadKeys.delete(name); // try again with the next snapshot
      return toast("Could not read the dead letters of " + name + ": " + err.message, true);
    }
    if (S.deadSeq.get(name) === seq) renderDead(name, data);
  }

  function bodyText(entry) {
    const text = typeof entry.body === "string" ? entry.body : JSON.stringify(entry.body);
    return text.length > BODY_CHARS ? text.slice(0, BODY_CHARS) + "…" : text + (entry.truncated ? "…" : "");
  }

  function renderDead(name, data) {
    const box = $("dead-queues");
    let section = [...box.children].find((n) => n.dataset.queue === name);
    if (!data.total) {
      if (section) section.remove();
    } else {
      const fresh = el("div", {className: "dead-queue", dataset: {testid: "dead-queue", queue: name, total: data.total}}, [
        el("h3", {}, [
          el("span", {text: name}),
          el("span", {className: "hint", text: data.total + " dead letter(s)" +
            (data.total > data.entries.length ? ", newest " + data.entries.length + " shown" : "")}),
          el("button", {text: "Requeue all", dataset: {testid: "requeue-all", queue: name},
            on: {click: () => act(name, "requeue", {all: true}, "Requeue all " + data.total + " dead letters of " + name + "?")}}),
          el("button", {text: "Purge all", className: "danger", dataset: {testid: "purge", queue: name},
            on: {click: () => act(name, "purge", {all: true}, "Delete all " + data.total + " dead letters of " + name +
              "? This cannot be undone.")}}),
        ]),
        el("table", {className: "grid dead", dataset: {testid: "dead-table"}}, [
          el("thead", {}, [el("tr", {}, ["id", "dead at", "attempts", "reason", "body", ""].map((h) => el("th", {text: h})))]),
          el("tbody", {}, data.entries.map((e) => el("tr", {dataset: {testid: "dead-row", id: e.id ?? ""}}, [
            cell(e.id ?? "(malformed)", {className: "id"}),
            cell(isNum(e.dead_at) ? fmtDate(e.dead_at * 1000) : "–"),
            cell(e.attempts ?? "–"),
            cell(e.reason, {className: "reason"}),
            el("td", {className: "body", dataset: {testid: "dead-body"}}, [el("code", {text: bodyText(e)})]),
            el("td", {}, [el("button", {text: "Requeue", dataset: {testid: "requeue"}, disabled: e.id ? null : "",
              on: {click: (ev) => { ev.target.disabled = true; act(name, "requeue", {ids: [e.id]}); }}})]),
          ]))),
        ]),
      ]);
      if (section) section.replaceWith(fresh); else box.append(fresh);
      section = fresh;
    }
    const sorted = [...box.children].sort((a, b) => a.dataset.queue.localeCompare(b.dataset.queue));
    if (sorted.some((n, i) => box.children[i] !== n)) box.replaceChildren(...sorted);
    const none = $("dead-none");
    if (!box.children.length && !none) box.after(el("p", {id: "dead-none", className: "empty", text: "No dead letters."}));
    if (box.children.length && none) none.remove();
  }

  async function act(name, action, payload, question) {
    if (question && !window.confirm(question)) return;
    try {
      const data = await postJSON(apiPath(name, "dead/" + action), payload);
      const n = action === "requeue" ? data.requeued : data.purged;
      toast((action === "requeue" ? "Requeued " : "Purged ") + n + " dead letter(s) of " + name + ".");
    } catch (err) {
      toast(action + " failed: " + err.message, true);
    }
    loadDead(name);
  }

  function banner(text) {
    const box = $("banner");
    box.hidden = !text;
    box.textContent = text || "";
  }

  // --- connection -------------------------------------------------------------

  function setConn(state, text) {
    const c = $("conn");
    c.dataset.state = state;
    c.textContent = text || state;
  }

  let retryMs = 1000;
  function connect() {
    const url = new URL("ws", location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.search = "";
    url.hash = "";
    setConn("connecting", "connecting…");
    const ws = new WebSocket(url.href);
    ws.onopen = () => { retryMs = 1000; setConn("live"); };
    ws.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (err) { return; }
      if (msg.type === "history") onHistory(msg);
      else if (msg.type === "snapshot") { banner(null); onSnapshot(msg.snapshot); }
      else if (msg.type === "error") banner("Statistics unavailable: " + msg.error);
    };
    ws.onclose = () => {
      setConn("closed", "disconnected, retrying");
      explainClose();
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  async function explainClose() {
    try {
      const res = await fetch("api/status", {credentials: "same-origin", method: "HEAD"});
      if (res.status === 401) banner("This server needs a token: open the page as /?token=YOUR_TOKEN.");
      else if (res.status === 403) banner("Refused by the server (host or origin not allowed).");
    } catch (err) {
      banner("The web server is not reachable.");
    }
  }

  window.addEventListener("resize", scheduleDraw);
  connect();
})();
