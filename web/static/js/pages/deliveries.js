// Deliveries: the outbox to external channels (GET /api/deliveries), newest first, filtered by state
// and channel, paged with "Load more" (next_before); a failed row is retried in place
// (POST /api/deliveries/<id>/retry) and shows the state the server gave it. Error texts arrive masked.

import { h, fmtTime } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const STATES = ["pending", "sent", "failed", "deferred"];
const PAGE = 50;

function stateChip(status) {
  const cls = status === "failed" ? "bad" : status === "sent" ? "ok" : status === "deferred" ? "warn" : "";
  return h("span", { class: `chip ${cls}`, dataset: { role: "state" } }, status);
}

function times(d) {
  const lines = [h("div", null, "created ", fmtTime(d.created_at))];
  if (d.sent_at) lines.push(h("div", null, "sent ", fmtTime(d.sent_at)));
  if (d.next_attempt_at && d.status === "pending") lines.push(h("div", null, "next try ", fmtTime(d.next_attempt_at)));
  if (d.updated_at && !d.sent_at) lines.push(h("div", null, "changed ", fmtTime(d.updated_at)));
  return h("td", { class: "muted small delivery-times" }, lines);
}

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "deliveries", "Deliveries",
    "Every reply to an external channel, as the outbox holds it: what went out, what waits, what failed.");
  const status = h("select", { id: "delivery-status", "aria-label": "State" },
    h("option", { value: "" }, "All states"), STATES.map((s) => h("option", { value: s }, s)));
  const channel = h("select", { id: "delivery-channel", "aria-label": "Channel" }, h("option", { value: "" }, "All channels"));
  const refresh = h("button", { class: "btn small", type: "button", id: "delivery-refresh" }, "Refresh");
  side.append(refresh);
  const summary = h("div", { class: "chips", id: "delivery-counts" });
  const tbody = h("tbody");
  const table = h("div", { class: "card table-card" }, h("table", { class: "devices deliveries", id: "deliveries-table" },
    h("thead", null, h("tr", null, ["Channel", "Chat", "Kind", "State", "Tries", "Last error", "Times", ""].map((t) => h("th", null, t)))),
    tbody));
  const more = h("button", { class: "btn small", type: "button", id: "delivery-more" }, "Load more");
  const note = h("div", { id: "delivery-note" });
  const filters = h("div", { class: "card ops-filters" }, status, channel, summary);
  let next = null;
  let generation = 0; // a reply to an older request (filters changed meanwhile) is dropped

  function row(d) {
    const retryCell = h("td", { class: "actions" });
    if (d.status === "failed") {
      const btn = h("button", { class: "btn small", type: "button", dataset: { action: "retry" } }, "Retry");
      btn.addEventListener("click", () => retry(d, btn));
      retryCell.append(btn);
    }
    return h("tr", { dataset: { delivery: String(d.id), status: d.status, channel: d.channel } },
      h("td", null, h("span", { class: "chip" }, d.channel)),
      h("td", null, h("code", null, d.chat_id), d.text ? h("div", { class: "muted small delivery-text" }, d.text) : null),
      h("td", { class: "nowrap" }, d.kind),
      h("td", null, stateChip(d.status)),
      h("td", { dataset: { role: "attempts" } }, String(d.attempts)),
      h("td", { class: "delivery-error", dataset: { role: "error" } },
        d.error ? h("span", { class: "bad-text" }, d.error) : "", d.error_code ? h("div", { class: "muted small" }, `code ${d.error_code}`) : null),
      times(d),
      retryCell);
  }

  async function retry(d, btn) {
    btn.disabled = true;
    btn.textContent = "Retrying…";
    try {
      const updated = await api(`/api/deliveries/${encodeURIComponent(d.id)}/retry`, { method: "POST" });
      btn.closest("tr").replaceWith(row(updated));
    } catch (err) {
      btn.disabled = false;
      btn.textContent = "Retry";
      btn.after(h("div", { class: "bad-text small", dataset: { role: "retry-error" } }, `Not retried: ${err.message}`));
    }
  }

  function showChannels(names) {
    const chosen = channel.value;
    const all = new Set(names);
    if (chosen) all.add(chosen); // keep a chosen channel even while it has no rows
    channel.replaceChildren(h("option", { value: "" }, "All channels"), ...[...all].sort().map((c) => h("option", { value: c }, c)));
    channel.value = chosen;
  }

  function showCounts(counts) {
    const totals = {};
    const channels = channel.value ? [counts[channel.value] || {}] : Object.values(counts); // the chosen channel's only
    for (const byStatus of channels) for (const [s, n] of Object.entries(byStatus)) totals[s] = (totals[s] || 0) + n;
    const shown = STATES.filter((s) => totals[s]);
    summary.replaceChildren(...(shown.length ? shown.map((s) => h("span", { class: `chip ${s === "failed" ? "bad" : s === "sent" ? "ok" : ""}`,
      dataset: { count: s } }, `${totals[s]} ${s}`)) : [h("span", { class: "muted" }, "no deliveries yet")]));
  }

  async function load(append) {
    const mine = ++generation;
    const params = new URLSearchParams({ limit: String(PAGE) });
    if (status.value) params.set("status", status.value);
    if (channel.value) params.set("channel", channel.value);
    if (append && next !== null) params.set("before", String(next));
    more.disabled = true;
    try {
      const data = await api(`/api/deliveries?${params}`);
      if (mine !== generation) return;
      if (data.counts) { // the first page only: later pages leave the counts as they were
        showChannels(data.channels || Object.keys(data.counts));
        showCounts(data.counts);
      }
      if (!append) tbody.replaceChildren();
      tbody.append(...data.deliveries.map(row));
      next = data.next_before;
      more.disabled = false;
      more.hidden = next === null;
      const filtered = status.value || channel.value;
      note.replaceChildren(tbody.children.length ? "" : h("div", { class: "card hint", id: "deliveries-empty" }, filtered
        ? "No deliveries match these filters."
        : "No deliveries yet: replies to external channels (Feishu, Telegram, WeChat, …) are listed here."));
      table.hidden = !tbody.children.length;
      body.replaceChildren(filters, note, table, more);
    } catch (err) {
      if (mine !== generation) return;
      more.disabled = false;
      body.replaceChildren(filters, errorBox(err));
    }
  }

  status.addEventListener("change", () => load(false));
  channel.addEventListener("change", () => load(false));
  refresh.addEventListener("click", () => load(false));
  more.addEventListener("click", () => load(true));

  return { el, show() { load(false); }, hide() { generation++; } };
}
