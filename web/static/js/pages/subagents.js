// Sub-agent runs: every turn that delegated, with its runs as a tree (parent -> children), from
// GET /api/subagents/tree; filter by status; click a run to read its result or error
// (GET /api/subagents/<id>). While a shown run is queued or running the page polls every few
// seconds, and it stops when the runs end or the page is left.

import { h, fmtTime, fmtTokens } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const STATUSES = ["queued", "running", "completed", "failed", "cancelled", "interrupted"];
const ACTIVE = new Set(["queued", "running"]);
const POLL_MS = 3000;
const PAGE = 20;

function statusChip(status) {
  const cls = status === "completed" ? "ok" : status === "failed" || status === "interrupted" ? "bad" : ACTIVE.has(status) ? "warn" : "";
  return h("span", { class: `chip ${cls}`, dataset: { role: "status" } }, status);
}

function duration(run) {
  if (!run.started_at) return "not started";
  const end = run.finished_at || Date.now() / 1000;
  const secs = Math.max(0, end - run.started_at);
  const took = secs < 60 ? `${secs.toFixed(1)} s` : `${Math.floor(secs / 60)} min ${Math.round(secs % 60)} s`;
  return run.finished_at ? took : `${took} so far`;
}

function section(title, text, role, extra) {
  if (text === null || text === undefined || text === "") return null;
  return h("div", { class: "run-section" }, h("h3", null, title), extra || null,
    h("pre", { class: "run-text", dataset: { role } }, text));
}

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "subagents", "Sub-agent runs",
    "What the agent delegated: each turn's runs as a tree, with their results.");
  const status = h("select", { id: "run-status", "aria-label": "Status" },
    h("option", { value: "" }, "All statuses"), STATUSES.map((s) => h("option", { value: s }, s)));
  const refresh = h("button", { class: "btn small", type: "button", id: "run-refresh" }, "Refresh");
  const live = h("span", { class: "live-stamp", id: "run-live", hidden: true }, h("span", { class: "pulse" }), "live");
  side.append(live, refresh);
  const detail = h("div", { id: "run-detail" });
  const list = h("div", { id: "run-turns", class: "run-turns" });
  const more = h("button", { class: "btn small", type: "button", id: "run-more" }, "Load more");
  const filters = h("div", { class: "card ops-filters" }, status,
    h("span", { class: "muted small" }, "A filter picks the turns with such a run; the rest of each tree is shown dimmed."));
  let selected = null; // the run whose detail is open
  let shownTurns = PAGE;
  let next = null;
  let timer = null;
  let visible = false;
  let generation = 0;

  function node(run) {
    const head = h("button", { class: "run-head", type: "button", "aria-expanded": String(run.id === selected) },
      statusChip(run.status),
      h("span", { class: "chip" }, run.subagent_type),
      run.background ? h("span", { class: "chip" }, "background") : null,
      h("span", { class: "run-desc" }, run.description || "(no description)"),
      h("span", { class: "muted small run-meta" },
        `${fmtTokens(run.input_tokens)} in · ${fmtTokens(run.output_tokens)} out · ${fmtTime(run.created_at)} · ${duration(run)}`));
    head.addEventListener("click", () => open(run.id));
    const cls = ["run-node", run.matches ? "" : "dim", run.id === selected ? "selected" : ""].filter(Boolean).join(" ");
    return h("li", { class: cls, dataset: { run: run.id, status: run.status, depth: String(run.depth) } }, head,
      run.error ? h("div", { class: "bad-text small run-error" }, run.error) : null,
      run.children.length ? h("ul", { class: "run-tree" }, run.children.map(node)) : null);
  }

  function turnCard(t) {
    return h("div", { class: "card run-turn", dataset: { turn: t.turn_id, session: t.session_id } },
      h("div", { class: "check-head" }, h("code", { class: "run-session" }, t.session_id),
        h("span", { class: "muted small" }, `turn ${t.turn_id} · ${fmtTime(t.newest)}`),
        t.active ? h("span", { class: "chip warn" }, `${t.active} active`) : null),
      h("ul", { class: "run-tree run-roots" }, t.runs.map(node)));
  }

  function schedule(active) {
    clearTimeout(timer);
    timer = null;
    live.hidden = !active;
    if (active && visible) {
      timer = setTimeout(() => (document.visibilityState === "visible" ? load(false) : schedule(true)), POLL_MS);
    }
  }

  async function load(append) {
    const mine = ++generation;
    const params = new URLSearchParams({ limit: String(append ? PAGE : Math.min(shownTurns, 100)) });
    if (status.value) params.set("status", status.value);
    if (append && next !== null) params.set("before", String(next));
    try {
      const data = await api(`/api/subagents/tree?${params}`);
      if (mine !== generation || !visible) return;
      if (!append) list.replaceChildren();
      list.append(...data.turns.map(turnCard));
      shownTurns = Math.max(PAGE, list.children.length);
      next = data.next_before;
      more.hidden = next === null;
      const empty = list.children.length ? null : h("div", { class: "card hint", id: "runs-empty" }, status.value
        ? `No runs are ${status.value}.`
        : "No sub-agent runs yet: they appear when the agent calls the task tool.");
      body.replaceChildren(filters, detail, ...(empty ? [empty] : [list, more]));
      const active = [...list.querySelectorAll(".run-node")].some((n) => ACTIVE.has(n.dataset.status));
      if (detailIsStale()) openQuietly(selected);
      schedule(active);
    } catch (err) {
      if (mine !== generation) return;
      body.replaceChildren(filters, detail, errorBox(err));
      schedule(false);
    }
  }

  // The open run's detail follows the tree: read again while the run is active, and once when it ends.
  function detailIsStale() {
    const shownRun = detail.querySelector(".run-detail");
    const inTree = selected && [...list.querySelectorAll(".run-node")].find((n) => n.dataset.run === selected);
    return Boolean(shownRun && inTree && (ACTIVE.has(inTree.dataset.status) || inTree.dataset.status !== shownRun.dataset.status));
  }

  function showDetail(run) {
    const close = h("button", { class: "btn small", type: "button", id: "run-close" }, "Close");
    close.addEventListener("click", () => {
      selected = null;
      detail.replaceChildren();
      for (const n of list.querySelectorAll(".run-node.selected")) n.classList.remove("selected");
    });
    const def = run.definition || {};
    const facts = [
      ["Type", `${run.subagent_type}${run.source ? ` (${run.source})` : ""}${run.background ? ", background" : ""}`],
      ["Session", run.session_id], ["Turn", run.turn_id], ["Parent run", run.parent_run_id || "the main agent"],
      ["Depth", String(run.depth)], ["Worker", run.worker || "—"],
      ["Tokens", `${run.input_tokens} in · ${run.output_tokens} out`],
      ["Created", fmtTime(run.created_at)], ["Started", fmtTime(run.started_at)], ["Finished", fmtTime(run.finished_at)],
      ["Ran", duration(run)],
    ];
    const children = run.children.length ? h("div", { class: "run-section" }, h("h3", null, "Started"),
      h("ul", { class: "run-children" }, run.children.map((c) => {
        const link = h("button", { class: "btn small subtle", type: "button", dataset: { child: c.id } }, c.description || c.id);
        link.addEventListener("click", () => open(c.id));
        return h("li", null, statusChip(c.status), " ", link);
      }))) : null;
    const cut = run.result_truncated ? h("p", { class: "muted small", dataset: { role: "truncated" } },
      `The first ${run.result.length.toLocaleString()} of ${run.result_chars.toLocaleString()} characters.`) : null;
    detail.replaceChildren(h("div", { class: "card run-detail", dataset: { run: run.id, status: run.status } },
      h("div", { class: "check-head" }, h("span", { class: "run-title" }, run.description || run.id), statusChip(run.status), close),
      h("div", { class: "run-facts" }, facts.map(([k, v]) => h("div", { class: "run-fact" }, h("span", { class: "k muted small" }, k), h("span", { class: "v" }, v)))),
      h("p", { class: "muted small run-tools" }, "Tools: ", (def.tools || []).join(", ") || "—"),
      section("Error", run.error, "error"),
      section("Result", run.result, "result", cut),
      ACTIVE.has(run.status) && !run.result ? h("p", { class: "muted", dataset: { role: "pending" } }, "Still running: the result appears when it ends.") : null,
      !ACTIVE.has(run.status) && run.result === null && !run.error ? h("p", { class: "muted" }, "This run left no result.") : null,
      children,
      run.prompt ? h("details", { class: "run-section" }, h("summary", null, "Prompt"), h("pre", { class: "run-text", dataset: { role: "prompt" } }, run.prompt)) : null));
  }

  async function openQuietly(id) {
    try {
      const run = await api(`/api/subagents/${encodeURIComponent(id)}`);
      if (selected === id) showDetail(run);
    } catch { /* the next poll tries again */ }
  }

  async function open(id) {
    selected = id;
    for (const n of list.querySelectorAll(".run-node")) n.classList.toggle("selected", n.dataset.run === id);
    detail.replaceChildren(h("div", { class: "card muted" }, "Loading…"));
    try {
      const run = await api(`/api/subagents/${encodeURIComponent(id)}`);
      if (selected === id) showDetail(run);
    } catch (err) {
      if (selected === id) detail.replaceChildren(errorBox(err));
    }
    detail.scrollIntoView({ block: "nearest" });
  }

  status.addEventListener("change", () => { shownTurns = PAGE; load(false); });
  refresh.addEventListener("click", () => load(false));
  more.addEventListener("click", () => load(true));

  return {
    el,
    show() { visible = true; load(false); },
    hide() { visible = false; generation++; schedule(false); },
  };
}
