/* smqsup web UI: what the page's scripts share (window.SMQ): DOM nodes built
   from text (never HTML), number and time formats, calls to the JSON API and
   the toast. Loaded first, then messages.js, then app.js. */
"use strict";
window.SMQ = (function () {
  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") node.textContent = String(v);
      else if (k === "className") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else node.setAttribute(k, String(v));
    }
    for (const c of children || []) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }
  function cell(text, props) { return el("td", Object.assign({text: text}, props || {})); }
  const $ = (id) => document.getElementById(id);
  const pad = (n) => String(n).padStart(2, "0");
  const isNum = (v) => typeof v === "number" && Number.isFinite(v);

  function fmtInt(v) { return isNum(v) ? Math.round(v).toLocaleString("en-US") : "–"; }
  function fmtRate(v) {
    if (!isNum(v)) return "–";
    return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function fmtPct(v) { return isNum(v) ? v.toFixed(1) : "–"; }
  function fmtMiB(bytes) { return isNum(bytes) && bytes > 0 ? (bytes / 1048576).toFixed(1) + " MiB" : "–"; }
  function fmtBytes(n) {
    if (!isNum(n)) return "–";
    return n < 1024 ? n + " B" : n < 1048576 ? (n / 1024).toFixed(1) + " KiB" : (n / 1048576).toFixed(1) + " MiB";
  }
  function fmtTime(ms, seconds) {
    const d = new Date(ms);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (seconds === false ? "" : ":" + pad(d.getSeconds()));
  }
  function fmtDate(ms) {
    const d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + fmtTime(ms);
  }

  function apiPath(name, rest) { return "api/queues/" + encodeURIComponent(name) + "/" + rest; }

  /** The JSON of an API answer; an Error with the server's one-line text for a refusal. */
  async function api(path, options) {
    const res = await fetch(path, Object.assign({credentials: "same-origin"}, options));
    let data = {};
    try { data = await res.json(); } catch (err) { /* not JSON: the status says it */ }
    if (!res.ok) throw new Error(data.error || "HTTP " + res.status);
    return data;
  }
  const getJSON = (path) => api(path, {headers: {Accept: "application/json"}});
  const postJSON = (path, payload) => api(path, {method: "POST", body: JSON.stringify(payload),
    headers: {"Content-Type": "application/json", Accept: "application/json"}});

  let toastTimer = 0;
  function toast(text, isError) {
    const box = $("toast");
    box.textContent = text;
    box.className = isError ? "toast error" : "toast";
    box.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { box.hidden = true; }, 8000);
  }

  return {el, cell, $, isNum, fmtInt, fmtRate, fmtPct, fmtMiB, fmtBytes, fmtTime, fmtDate, apiPath, getJSON,
    postJSON, toast};
})();
