/* smqsup web UI: the message browser (one queue's pending, scheduled,
   processing or dead messages, with Remove for those still waiting and
   Requeue / Purge for dead letters) and each queue's Pause / Resume button.

   The list is read from GET api/queues/Q/messages when the queue or the tab
   changes, on Refresh, and again when a snapshot shows the queue changed (at
   most every RELOAD_MS); it is redrawn only when what it shows changed, so a
   button is not replaced under the pointer. Every value from the server
   reaches the page through textContent or an attribute, never as HTML. */
"use strict";
window.SMQ.messages = (function (SMQ) {
  const {el, cell, $, isNum, fmtBytes, fmtDate, apiPath, getJSON, postJSON, toast} = SMQ;
  const LIMIT = 100;
  const RELOAD_MS = 2000;
  const LABELS = {pending: "pending", scheduled: "scheduled or retrying", processing: "processing", dead: "dead"};
  const COLUMNS = {
    pending: ["id", "created", "attempts", "priority", "size", "body", ""],
    scheduled: ["id", "due", "kind", "created", "attempts", "priority", "size", "body", ""],
    processing: ["id", "consumer", "created", "attempts", "priority", "progress", "size", "body", ""],
    dead: ["id", "dead at", "attempts", "reason", "size", "body", ""],
  };
  const B = {queue: "", state: "pending", names: "", snap: null, key: "", loadedAt: 0, seq: 0, shown: ""};
  const pauseButtons = new Map();

  // --- pause and resume -------------------------------------------------------

  /** The queue's Pause / Resume button (one node per queue, so that a table
      redrawn every second does not replace it under the pointer). */
  function pauseButton(name, paused) {
    let button = pauseButtons.get(name);
    if (!button) {
      button = el("button", {dataset: {testid: "pause", queue: name}});
      button.addEventListener("click", () => setPaused(name, button));
      pauseButtons.set(name, button);
    }
    if (!button.disabled) {
      button.textContent = paused ? "Resume" : "Pause";
      button.dataset.paused = String(!!paused);
    }
    return button;
  }

  async function setPaused(name, button) {
    const pause = button.dataset.paused !== "true";
    button.disabled = true;
    try {
      const data = await postJSON(apiPath(name, pause ? "pause" : "resume"), {});
      toast((pause ? "Paused " : "Resumed ") + name + (data.changed ? "." : " (it already was)."));
      button.textContent = pause ? "Resume" : "Pause";
      button.dataset.paused = String(pause);
    } catch (err) {
      toast((pause ? "Pause" : "Resume") + " of " + name + " failed: " + err.message, true);
    }
    button.disabled = false;
  }

  // --- the list ---------------------------------------------------------------

  function keyOf(snap) {
    const q = snap && snap.queues[B.queue];
    return q ? B.queue + "\u0000" + B.state + "\u0000" + JSON.stringify([q.sizes, q.counters]) : "";
  }

  /** Called with every snapshot: keep the queue list, the paused mark and the rows current. */
  function update(snap) {
    B.snap = snap;
    const names = Object.keys(snap.queues).sort();
    if (names.join("\u0000") !== B.names) {
      B.names = names.join("\u0000");
      $("browse-queue").replaceChildren(...names.map((n) => el("option", {value: n, text: n})));
      if (!names.includes(B.queue)) B.queue = names[0] || "";
      $("browse-queue").value = B.queue;
      if (B.queue) choose(B.queue, B.state);
    }
    const q = snap.queues[B.queue];
    $("browse-paused").hidden = !(q && q.paused);
    if (q && keyOf(snap) !== B.key && Date.now() - B.loadedAt >= RELOAD_MS) load();
  }

  function choose(queue, state) {
    B.queue = queue;
    B.state = state;
    B.shown = "";
    for (const tab of document.querySelectorAll("#browse-tabs button")) {
      tab.classList.toggle("active", tab.dataset.state === state);
      tab.setAttribute("aria-selected", String(tab.dataset.state === state));
    }
    $("browse-paused").hidden = !(B.snap && B.snap.queues[queue] && B.snap.queues[queue].paused);
    load();
  }

  async function load() {
    if (!B.queue) return;
    const seq = ++B.seq;
    B.key = keyOf(B.snap);
    B.loadedAt = Date.now();
    let data;
    try {
      data = await getJSON(apiPath(B.queue, "messages?state=" + B.state + "&limit=" + LIMIT));
    } catch (err) {
      if (seq !== B.seq) return;
      B.key = ""; // try again with a later snapshot
      B.shown = "";
      $("browse-rows").replaceChildren();
      $("browse-info").textContent = "Could not list the messages: " + err.message;
      return;
    }
    if (seq === B.seq) render(data);
  }

  function render(data) {
    const shown = JSON.stringify(data);
    if (shown === B.shown) return;
    B.shown = shown;
    const columns = COLUMNS[data.state];
    $("browse-head").replaceChildren(el("tr", {}, columns.map((h) => el("th", {text: h}))));
    const rows = data.messages.map((m) => el("tr", {dataset: {testid: "browse-row", id: m.id, state: m.state,
      where: m.where}}, cells(data.queue, data.state, m)));
    if (!rows.length) {
      rows.push(el("tr", {}, [el("td", {colspan: columns.length, className: "empty",
        text: "No " + LABELS[data.state] + " messages."})]));
    }
    $("browse-rows").replaceChildren(...rows);
    const table = $("browse-table");
    table.dataset.queue = data.queue;
    table.dataset.state = data.state;
    const n = data.messages.length;
    $("browse-info").textContent = isNum(data.total)
      ? data.total + " " + LABELS[data.state] + (data.total > n ? ", the first " + n + " shown" : "")
      : n + " shown";
  }

  const when = (seconds) => isNum(seconds) ? fmtDate(seconds * 1000) : "–";

  function due(seconds) {
    if (!isNum(seconds)) return "–";
    const left = seconds - (B.snap ? B.snap.t : Date.now()) / 1000;
    const rel = left <= 0 ? "due" : left < 90 ? "in " + Math.ceil(left) + " s"
      : left < 5400 ? "in " + Math.round(left / 60) + " min" : "in " + Math.round(left / 3600) + " h";
    return fmtDate(seconds * 1000) + " (" + rel + ")";
  }

  function cells(queue, state, m) {
    const id = cell(m.id + (m.malformed ? " (malformed)" : ""), {className: "id"});
    const body = el("td", {className: "body", dataset: {testid: "browse-body"}}, [el("code", {text: m.preview})]);
    const common = [cell(m.attempts ?? "–"), cell(m.priority ?? "–")];
    if (state === "pending") {
      return [id, cell(when(m.created_at)), ...common, cell(fmtBytes(m.size)), body, removeCell(queue, m)];
    }
    if (state === "scheduled") {
      return [id, cell(due(m.due_at), {dataset: {testid: "due"}}), cell(m.retry ? "retry" : "scheduled"),
        cell(when(m.created_at)), ...common, cell(fmtBytes(m.size)), body, removeCell(queue, m)];
    }
    if (state === "processing") {
      const progress = m.progress === undefined || m.progress === null ? "–" : JSON.stringify(m.progress);
      return [id, cell(m.consumer ?? "–"), cell(when(m.created_at)), ...common,
        cell(progress.length > 80 ? progress.slice(0, 79) + "…" : progress, {dataset: {testid: "progress"}}),
        cell(fmtBytes(m.size)), body, el("td", {}, [cancelButton(queue, m)])];
    }
    return [id, cell(when(m.dead_at)), cell(m.attempts ?? "–"), cell(m.reason ?? "–", {className: "reason"}),
      cell(fmtBytes(m.size)), body, el("td", {}, [
        button("Requeue", "browse-requeue", () => act(queue, "requeue", m.id)),
        button("Purge", "browse-purge", () => act(queue, "purge", m.id,
          "Delete dead letter " + m.id + " of " + queue + "? This cannot be undone."), "danger"),
      ])];
  }

  function button(text, testid, onClick, className) {
    return el("button", {text: text, className: className, dataset: {testid: testid},
      on: {click: (ev) => { ev.target.disabled = true; onClick(); }}});
  }

  function removeCell(queue, m) {
    return el("td", {}, [button("Remove", "browse-remove", () => act(queue, "remove", m.id,
      "Remove message " + m.id + " from " + queue + "? This cannot be undone."), "danger"), cancelButton(queue, m)]);
  }

  function cancelButton(queue, m) {
    return button("Cancel", "browse-cancel", () => act(queue, "cancel", m.id,
      "Cancel message " + m.id + " of " + queue + "? It is dead-lettered \"cancelled\", never retried."), "danger");
  }

  /** What each row action posts to, and the field of the answer that counts what it did. */
  const ACTIONS = {remove: {path: "remove", field: "removed", verb: "Remove"},
    cancel: {path: "cancel", field: "cancelled", verb: "Cancel"},
    requeue: {path: "dead/requeue", field: "requeued", verb: "Requeue"},
    purge: {path: "dead/purge", field: "purged", verb: "Purge"}};

  /** POST {"ids": [id]} for ``action``; say how it went; list again. */
  async function act(queue, action, id, question) {
    const a = ACTIONS[action];
    if (question && !window.confirm(question)) { B.shown = ""; return load(); }
    try {
      const n = (await postJSON(apiPath(queue, a.path), {ids: [id]}))[a.field];
      toast(n ? a.field[0].toUpperCase() + a.field.slice(1) + " message " + id + " of " + queue + "."
        : "Message " + id + " of " + queue + " was not " + a.field + ": it is no longer there.", !n);
    } catch (err) {
      toast(a.verb + " of " + id + " failed: " + err.message, true);
    }
    B.shown = "";
    load();
  }

  $("browse-queue").addEventListener("change", (ev) => choose(ev.target.value, B.state));
  for (const tab of document.querySelectorAll("#browse-tabs button")) {
    tab.addEventListener("click", () => choose(B.queue, tab.dataset.state));
  }
  $("browse-refresh").addEventListener("click", () => { B.shown = ""; load(); });

  return {update, pauseButton};
})(window.SMQ);
