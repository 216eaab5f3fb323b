// MCP servers: each configured server's state, tools and last error as the workers report them
// (GET /api/mcp every 2 s while shown). Read-only: servers are configured in config.json.

import { h, fmtTime } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const EVERY_MS = 2000;
const GOOD = new Set(["connected", "disabled"]);

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "mcp", "MCP servers", "Tool servers from mcpServers, per worker, live.");
  const stamp = h("span", { class: "live-stamp" }, h("span", { class: "pulse" }), h("span", { class: "stamp-text" }, "…"));
  side.append(stamp);
  let timer = null;

  function workers(s) {
    const rows = Object.entries(s.workers || {});
    if (rows.length < 2) return null;
    return h("ul", { class: "worker-list" }, rows.map(([name, w]) => h("li", null,
      h("code", null, name), ` ${w.state}, ${w.tools} tool(s)`, w.last_error ? ` — ${w.last_error}` : "")));
  }

  function failedTools(s) {
    const rows = Object.entries(s.failed_tools || {});
    if (!rows.length) return null;
    return h("div", { class: "mcp-failed-tools" }, h("strong", null, "Tools left out: "),
      h("ul", null, rows.map(([name, why]) => h("li", null, h("code", null, name), ` — ${why}`))));
  }

  function card(s) {
    const ok = GOOD.has(s.state);
    const retry = Object.values(s.workers || {}).map((w) => w.retry_in).find((r) => r != null);
    const showError = s.last_error && s.state !== "connected";
    return h("div", { class: `card check ${ok ? "ok" : "bad"}`, dataset: { server: s.key, state: s.state } },
      h("div", { class: "check-head" }, h("span", { class: `dot ${ok ? "ok" : "bad"}` }),
        h("span", { class: "check-name" }, s.name),
        h("span", { class: `chip ${ok ? "ok" : "bad"}`, dataset: { role: "state" } }, s.state)),
      h("div", { class: "check-detail" },
        `${s.transport} · `, h("span", { dataset: { role: "tools" } }, `${s.tools} tool(s)`),
        s.name !== s.key ? ` · key ${s.key}` : ""),
      showError ? h("div", { class: "check-detail mcp-error", dataset: { role: "error" } },
        s.last_error, retry != null ? (retry >= 1 ? ` (next attempt in ${Math.ceil(retry)} s)` : " (retrying now)") : "") : null,
      failedTools(s), workers(s));
  }

  async function load() {
    try {
      const { servers } = await api("/api/mcp");
      body.replaceChildren(servers.length
        ? h("div", { class: "checks", id: "mcp-servers" }, servers.map(card))
        : h("div", { class: "card", id: "mcp-empty" },
          "No MCP servers are configured. Add them under ", h("code", null, "mcpServers"), " in config.json."));
      stamp.lastChild.textContent = `updated ${new Date().toLocaleTimeString()}`;
      stamp.title = `server time ${fmtTime(Date.now() / 1000)}`;
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
