// Usage: tokens and estimated cost from the usage ledger (GET /api/usage) over the last 7, 30 or 90
// UTC days: a bar per day for tokens and for cost (inline SVG, no library), then the spend by user,
// agent, model and job. Names arrive as stored (a user id may hold anything): they go in as text.

import { h, fmtTokens } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const RANGES = [7, 30, 90];
const TABLES = [["user", "By user"], ["agent", "By agent"], ["model", "By model"], ["job", "By job"]];
const CHART_H = 100;
const SLOT = 10; // one day's width in the viewBox; bars stretch to the card's width

function money(n) {
  const v = Number(n) || 0;
  return `$${v >= 100 ? v.toFixed(2) : v.toFixed(4)}`;
}

function svg(tag, attrs) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

// One bar chart: a rect per day, its height the day's share of the range's busiest day.
function barChart(id, title, days, value, label) {
  const max = Math.max(0, ...days.map(value));
  const chart = svg("svg", { viewBox: `0 0 ${days.length * SLOT} ${CHART_H}`, preserveAspectRatio: "none",
    class: "usage-bars", role: "img", "aria-label": title, id });
  days.forEach((d, i) => {
    const v = value(d);
    const height = max > 0 && v > 0 ? Math.max(1, (v / max) * CHART_H) : 0; // a day with any use stays visible
    const bar = svg("rect", { x: i * SLOT + 1, y: CHART_H - height, width: SLOT - 2, height,
      "data-day": d.day, "data-value": v });
    const tip = svg("title", {});
    tip.textContent = `${d.day}: ${label(v)}`;
    bar.append(tip);
    chart.append(bar);
  });
  const ends = days.length ? [days[0].day, days[days.length - 1].day] : ["", ""];
  return h("div", { class: "card usage-chart" },
    h("div", { class: "usage-chart-head" }, h("strong", null, title), h("span", { class: "muted small" }, `peak ${label(max)}`)),
    chart,
    h("div", { class: "usage-axis muted small" }, h("span", null, ends[0]), h("span", null, ends[1])));
}

function numbers(t) {
  return [String(t.calls), fmtTokens(t.input_tokens), fmtTokens(t.cached_input_tokens), fmtTokens(t.output_tokens),
    money(t.cost_usd)].map((text) => h("td", { class: "num" }, text));
}

function groupTable(dim, title, data) {
  const rows = data.groups.map((g) => {
    const key = g.key[dim];
    const name = key === null || key === "" ? h("span", { class: "muted" }, dim === "job" ? "(no job: chats)" : "(none)") : key;
    return h("tr", { dataset: { key: key === null ? "" : key } }, h("td", { class: "usage-name" }, name), numbers(g));
  });
  const body = rows.length ? rows : [h("tr", null, h("td", { class: "muted", colspan: "6" }, "no model calls in this range"))];
  return h("div", { class: "card table-card" },
    h("h2", { class: "usage-table-title" }, title, data.more ? h("span", { class: "muted small" }, ` (first ${data.groups.length})`) : null),
    h("div", { class: "table-scroll" }, h("table", { class: "devices usage-table", id: `usage-by-${dim}` },
      h("thead", null, h("tr", null, ["", "Calls", "Input", "Cached", "Output", "Cost"].map((t) => h("th", null, t)))),
      h("tbody", null, body))));
}

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "usage", "Usage",
    "Tokens and estimated cost of every model call, per UTC day (prices from the configuration).");
  const range = h("select", { id: "usage-range", "aria-label": "Range" },
    RANGES.map((n) => h("option", { value: String(n) }, `Last ${n} days`)));
  range.value = "30";
  const refresh = h("button", { class: "btn small", type: "button", id: "usage-refresh" }, "Refresh");
  side.append(range, refresh);
  let generation = 0;

  async function load() {
    const mine = ++generation;
    const since = `${range.value}d`;
    try {
      const answers = await Promise.all(TABLES.map(([dim]) =>
        api(`/api/usage?${new URLSearchParams({ by: dim, since, limit: "50" })}`)));
      if (mine !== generation) return;
      const first = answers[0];
      const total = first.total;
      const summary = h("div", { class: "chips", id: "usage-total" },
        h("span", { class: "chip", dataset: { role: "cost" } }, `${money(total.cost_usd)} estimated`),
        h("span", { class: "chip", dataset: { role: "tokens" } }, `${fmtTokens(total.tokens)} tokens`),
        h("span", { class: "chip", dataset: { role: "calls" } }, `${total.calls} calls`),
        h("span", { class: "muted small" }, `${first.since} to ${first.until}`));
      body.replaceChildren(summary,
        h("div", { class: "usage-charts" },
          barChart("usage-tokens-chart", "Tokens per day", first.days, (d) => d.tokens, (v) => `${fmtTokens(v)} tokens`),
          barChart("usage-cost-chart", "Estimated cost per day", first.days, (d) => d.cost_usd, money)),
        h("div", { class: "usage-tables" }, TABLES.map(([dim, title], i) => groupTable(dim, title, answers[i]))));
    } catch (err) {
      if (mine !== generation) return;
      body.replaceChildren(errorBox(err));
    }
  }

  range.addEventListener("change", load);
  refresh.addEventListener("click", load);
  return { el, show() { load(); }, hide() { generation++; } };
}
