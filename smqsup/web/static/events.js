/* smqsup web UI: the live event log of the queue the message browser shows
   (queue option events: true), newest on top, at most ROWS_MAX rows.

   Polls GET api/queues/Q/events every POLL_MS: first without "after" (the
   newest LIMIT events), then with the "after" each answer gives, so each
   poll brings only what is new. An answer with "more" set means the queue
   writes faster than the page reads: the next poll asks for the newest
   again, and a row marks the gap. Every value from the server reaches the
   page through textContent, never as HTML (anyone who may write to Redis
   may write into an event stream). */
"use strict";
window.SMQ.events = (function (SMQ) {
  const {el, cell, $, isNum, apiPath, getJSON} = SMQ;
  const POLL_MS = 1500;
  const LIMIT = 100;
  const ROWS_MAX = 200;
  const DATA_CHARS = 300;
  const E = {queue: "", after: "", seq: 0, timer: 0, shown: 0, on: false, busy: false, again: false,
    seen: new Set()};

  const pad = (n, w) => String(n).padStart(w || 2, "0");

  /** Local time with ms, as the rest of the page shows times (with the date). */
  function when(ms) {
    if (!isNum(ms)) return "–";
    const d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":"
      + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
  }

  function dataText(data) {
    if (data === undefined || data === null) return "";
    const text = typeof data === "string" ? data : JSON.stringify(data);
    return text.length > DATA_CHARS ? text.slice(0, DATA_CHARS - 1) + "…" : text;
  }

  /** An event's identity: its partition and its cursor. */
  const keyOf = (e) => String(e.queue) + " " + String(e.cursor);

  function row(e) {
    return el("tr", {dataset: {testid: "event-row", event: String(e.event), id: String(e.id), key: keyOf(e)}}, [
      cell(when(e.at_ms)),
      cell(e.event, {className: "event event-" + String(e.event).replace(/[^a-z]/g, "")}),
      cell(e.id || "–", {className: "id"}),
      cell(isNum(e.attempts) ? e.attempts : "–"),
      el("td", {className: "body"}, [el("code", {text: dataText(e.data)})]),
    ]);
  }

  function info(text) { $("events-info").textContent = text; }

  /** Start over on ``queue``: an empty log, read from its newest events. */
  function reset(queue) {
    E.queue = queue;
    E.after = "";
    E.shown = 0;
    E.seen = new Set();
    E.seq++;
    $("event-rows").replaceChildren();
    $("events-queue").textContent = queue ? "of " + queue : "";
    info(queue ? "loading…" : "");
  }

  function show(data) {
    const rows = $("event-rows");
    // After a skip to the newest ("more"), those may overlap the rows shown: each event once.
    const fresh = data.events.filter((e) => !E.seen.has(keyOf(e)));
    for (const e of fresh) { E.seen.add(keyOf(e)); rows.prepend(row(e)); }
    E.shown += fresh.length;
    if (data.more) {
      rows.prepend(el("tr", {className: "gap", dataset: {testid: "event-gap"}}, [el("td", {colspan: 5,
        text: "… more events than the page keeps up with: skipped to the newest"})]));
    }
    while (rows.childElementCount > ROWS_MAX) rows.lastElementChild.remove();
    if (E.seen.size > 10 * ROWS_MAX) {  // forget what no longer shows (an older event never comes back)
      E.seen = new Set(Array.from(rows.children, (tr) => tr.dataset.key).filter(Boolean));
    }
    E.on = data.events_max > 0;
    if (!E.shown) {
      info(E.on ? "No events yet." : "no events: set `events: true` on this queue");
    } else {
      info(rows.childElementCount + " newest shown" + (E.on ? "" : " (its consumers no longer record events)"));
    }
  }

  /** One poll of the queue the browser shows (none while the page is hidden). */
  async function once() {
    const queue = $("browse-queue").value || "";
    if (queue !== E.queue) reset(queue);
    if (!queue || document.hidden) return;
    const seq = E.seq;
    const after = E.after ? "&after=" + encodeURIComponent(E.after) : "";
    try {
      const data = await getJSON(apiPath(queue, "events?limit=" + LIMIT + after));
      if (seq !== E.seq) return; // the queue changed meanwhile: this answer is not its
      show(data);
      E.after = data.more ? "" : data.after;
    } catch (err) {
      if (seq === E.seq) info("Could not read the events: " + err.message);
    }
  }

  /** Poll now, then every POLL_MS; one poll at a time (a call during one asks for another after it). */
  async function poll() {
    if (E.busy) { E.again = true; return; }
    clearTimeout(E.timer);
    E.busy = true;
    try { await once(); } finally { E.busy = false; }
    if (E.again) { E.again = false; poll(); return; }
    E.timer = setTimeout(poll, POLL_MS);
  }

  $("browse-queue").addEventListener("change", poll);
  poll();
  return {poll};
})(window.SMQ);
