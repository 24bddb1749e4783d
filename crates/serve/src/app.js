// mailvault's pages work without scripts: this file only makes them livelier, through
// the JSON API (docs/api.md), and nothing in it is needed to read, search, download or
// restore. A running restore job's page follows the job with GET /api/v1/job instead of
// reloading itself every 2 seconds (the <noscript> refresh), and shows the report when it
// ends.
"use strict";

// As the server writes sizes (mailvault_core::report::human_bytes).
function humanBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u + 1 < units.length) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? n + " B" : v.toFixed(1) + " " + units[u];
}

function followJob(box) {
  const url = "/api/v1/job?id=" + encodeURIComponent(box.dataset.job);
  const bar = box.querySelector("progress");
  const label = box.querySelector("label[for=progress]");
  const poll = async () => {
    let v;
    try {
      const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!r.ok) {
        // Logged out, or the server restarting: the page says what a reload shows.
        window.setTimeout(() => window.location.reload(), 5000);
        return;
      }
      v = await r.json();
    } catch (e) {
      window.setTimeout(poll, 5000);
      return;
    }
    if (v.state !== "running" && v.state !== "cancelling") {
      window.location.reload();
      return;
    }
    if (bar && label) {
      bar.max = Math.max(v.total_items, 1);
      bar.value = Math.min(v.done_items, v.total_items);
      const pct = v.total_items > 0 ? Math.floor((Math.min(v.done_items, v.total_items) * 100) / v.total_items) : 0;
      bar.textContent = pct + "%";
      label.textContent = v.done_items + " of " + v.total_items + " messages · " +
        humanBytes(v.done_bytes) + " of " + humanBytes(v.total_bytes);
      box.dataset.polled = String(Number(box.dataset.polled || "0") + 1);
    }
    window.setTimeout(poll, 1000);
  };
  window.setTimeout(poll, 500);
}

document.addEventListener("DOMContentLoaded", () => {
  const job = document.querySelector("[data-job]");
  if (job) {
    followJob(job);
  }
});
