// Health: every dependency and worker, refreshed live (GET /api/health every 2 s while shown).

import { h, fmtTime } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const EVERY_MS = 2000;
const LABELS = { database: "Database", redis: "Redis", workers: "Workers", beat: "Scheduler (beat)", provider: "LLM provider", sandbox: "Shell sandbox", deliveries: "Channel deliveries" };

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "health", "Health", "Dependencies and workers, live.");
  const stamp = h("span", { class: "live-stamp" }, h("span", { class: "pulse" }), h("span", { class: "stamp-text" }, "…"));
  side.append(stamp);
  let timer = null;

  function check(name, c) {
    const extra = [];
    if (Array.isArray(c.alive) && c.alive.length) {
      extra.push(h("ul", { class: "worker-list" }, c.alive.map((w) => h("li", null, h("code", null, w)))));
    }
    return h("div", { class: `card check ${c.ok ? "ok" : "bad"}`, dataset: { check: name } },
      h("div", { class: "check-head" }, h("span", { class: `dot ${c.ok ? "ok" : "bad"}` }),
        h("span", { class: "check-name" }, LABELS[name] || name),
        h("span", { class: `chip ${c.ok ? "ok" : "bad"}` }, c.ok ? "OK" : "Problem")),
      h("div", { class: "check-detail" }, c.detail || ""), extra);
  }

  async function load() {
    try {
      const report = await api("/api/health");
      const ok = report.status === "ok";
      body.replaceChildren(
        h("div", { class: `status-banner ${ok ? "ok" : "bad"}`, id: "health-status" },
          h("span", { class: `dot ${ok ? "ok" : "bad"}` }),
          h("strong", null, ok ? "PicoBot is healthy" : "PicoBot is degraded"),
          h("span", { class: "muted banner-sub" }, `${report.connections ?? 0} open connection(s) on this web process`)),
        h("div", { class: "checks" }, Object.entries(report.checks).map(([name, c]) => check(name, c))));
      stamp.lastChild.textContent = `updated ${new Date().toLocaleTimeString()}`;
      stamp.title = `server time ${fmtTime(report.time)}`;
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return {
    el,
    show() { load(); timer = setInterval(() => { if (document.visibilityState === "visible") load(); }, EVERY_MS); },
    hide() { clearInterval(timer); },
  };
}
