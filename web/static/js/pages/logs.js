// Logs: recent log lines of every process — web, workers, beat, channel pollers — newest first
// (GET /api/logs). Filters: level and above, process, logger prefix, text; older pages; auto-refresh.
// Every line was masked by the server; it is shown as text, never as markup.

import { h } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
const REFRESH_MS = 3000;
const LIMIT = 100;

function fmtTs(ts) {
  if (ts == null) return "—";
  const d = new Date(ts * 1000);
  return `${d.toLocaleDateString()} ${d.toLocaleTimeString()}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

function levelChip(level) {
  const cls = level === "ERROR" || level === "CRITICAL" ? "bad" : level === "WARNING" ? "warn" : level === "DEBUG" ? "" : "ok";
  return h("span", { class: `chip ${cls}`, dataset: { role: "level" } }, level);
}

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "logs", "Logs", "Recent log lines of every process, newest first; secrets are masked.");
  const level = h("select", { id: "logs-level", "aria-label": "Level and above" },
    h("option", { value: "" }, "All levels"), LEVELS.map((l) => h("option", { value: l }, `${l} and above`)));
  const processes = h("datalist", { id: "logs-processes" });
  const process = h("input", { id: "logs-process", type: "search", placeholder: "process (web, worker, beat, w1@host)", list: "logs-processes", size: 22 });
  const logger = h("input", { id: "logs-logger", type: "search", placeholder: "logger (picobot.gateway)", size: 20 });
  const q = h("input", { id: "logs-q", type: "search", placeholder: "text", size: 18 });
  const auto = h("input", { id: "logs-auto", type: "checkbox" });
  const refresh = h("button", { class: "btn small", id: "logs-refresh", type: "button" }, "Refresh");
  const status = h("span", { id: "logs-status", class: "muted small", "aria-live": "polite" });
  const tbody = h("tbody");
  const table = h("table", { class: "devices logs", id: "logs-table" },
    h("thead", null, h("tr", null, ["Time", "Level", "Process", "Logger", "Message"].map((t) => h("th", null, t)))), tbody);
  const more = h("button", { class: "btn small", id: "logs-more", type: "button", hidden: true }, "Older lines");
  const empty = h("div", { class: "card", id: "logs-empty", hidden: true });
  const error = h("div", { id: "logs-error" });
  side.append(refresh);
  body.append(h("div", { class: "card hint ops-filters logs-filters" }, level, process, processes, logger, q,
    h("label", { class: "logs-auto" }, auto, " Auto-refresh"), status),
  error, h("div", { class: "card table-card" }, table), empty, more);

  let timer = null;
  let next = null;
  let seq = 0; // a newer request wins: an older answer arriving late is dropped
  const seen = new Set();

  function params(before) {
    const p = new URLSearchParams({ limit: String(LIMIT) });
    if (level.value) p.set("level", level.value);
    for (const [name, input] of [["process", process], ["logger", logger], ["q", q]]) if (input.value.trim()) p.set(name, input.value.trim());
    if (before) p.set("before", before);
    return p;
  }

  function row(line) {
    for (const name of [line.process, line.name]) {
      if (name && !seen.has(name)) { seen.add(name); processes.append(h("option", { value: name })); }
    }
    return h("tr", { dataset: { id: line.id, level: line.level, process: line.process } },
      h("td", { class: "log-ts" }, fmtTs(line.ts)),
      h("td", null, levelChip(line.level)),
      h("td", { class: "log-process", title: `${line.name} pid ${line.pid ?? "?"}` }, line.process || "—",
        h("div", { class: "muted small" }, line.name)),
      h("td", { class: "log-logger" }, h("code", null, line.logger)),
      h("td", { class: "log-message" }, h("pre", { class: "log-text" }, line.message),
        line.truncated ? h("span", { class: "chip warn" }, "truncated") : null));
  }

  async function load(before = null) {
    const mine = ++seq;
    status.textContent = "Loading…";
    try {
      const data = await api(`/api/logs?${params(before)}`);
      if (mine !== seq) return;
      error.replaceChildren();
      const rows = data.lines.map(row);
      if (before) tbody.append(...rows); else tbody.replaceChildren(...rows);
      next = data.next_before;
      more.hidden = !next;
      const none = !tbody.children.length;
      empty.hidden = !none;
      table.parentElement.hidden = none;
      const filtered = [...params().keys()].some((k) => k !== "limit");
      empty.textContent = !data.capture.enabled
        ? "Log capture is turned off (logging.capture.enabled is false): the processes write to stderr only."
        : filtered ? "No log lines match these filters." : "No log lines yet.";
      status.textContent = `${tbody.children.length} line(s) · updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (mine !== seq) return;
      status.textContent = "";
      error.replaceChildren(errorBox(err));
    }
  }

  let typing = null;
  const reload = () => { clearTimeout(typing); typing = setTimeout(() => load(), 250); };
  for (const input of [process, logger, q]) input.addEventListener("input", reload);
  level.addEventListener("change", () => load());
  refresh.addEventListener("click", () => load());
  more.addEventListener("click", () => next && load(next));
  auto.addEventListener("change", () => {
    clearInterval(timer);
    timer = auto.checked ? setInterval(() => { if (!document.hidden) load(); }, REFRESH_MS) : null;
  });

  return {
    el,
    show: () => load(),
    hide: () => { clearInterval(timer); timer = null; auto.checked = false; },
  };
}
