/* smqsup web UI: the open batches of every queue (Producer.batch), polled
   from GET api/batches every POLL_MS. Every value from the server reaches
   the page through textContent, never as HTML (anyone who may write to
   Redis may write a batch's fields). */
"use strict";
window.SMQ.batches = (function (SMQ) {
  const {el, cell, $, isNum, fmtInt, getJSON} = SMQ;
  const POLL_MS = 2000;

  function opened(ms) {
    return isNum(ms) ? new Date(ms).toLocaleString() : "–";
  }

  function row(b) {
    return el("tr", {dataset: {testid: "batch-row", batch: String(b.batch)}}, [
      cell(String(b.batch), {className: "id"}), cell(String(b.home)), cell(fmtInt(b.total)), cell(fmtInt(b.done)),
      cell(fmtInt(b.failed)), cell(fmtInt(b.pending)), cell(b.closed ? "yes" : "no"), cell(opened(b.created_ms)),
    ]);
  }

  async function poll() {
    try {
      const answer = await getJSON("api/batches");
      const rows = Array.isArray(answer.batches) ? answer.batches : [];
      $("batch-rows").replaceChildren(...rows.map(row));
      $("batches-info").textContent = rows.length ? "" : "none open";
    } catch (err) {
      $("batches-info").textContent = "cannot read: " + String(err && err.message || err);
    }
    setTimeout(poll, POLL_MS);
  }

  poll();
  return {poll};
})(window.SMQ);
