// Knowledge: the knowledge base documents, knowledge/<name>/content.md under the workspace and the
// home (GET /api/knowledge, ?q= to search); view one (GET /api/knowledge/<name>).

import { h, fmtAgo } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "knowledge", "Knowledge", "Documents the agent searches and writes for later sessions.");
  const query = h("input", { id: "knowledge-query", placeholder: "Search words…", type: "search" });
  const results = h("div", { id: "knowledge-results" });
  const form = h("form", { class: "card memory-filters" }, query, " ", h("button", { class: "btn small", type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });

  async function load() {
    const q = query.value.trim();
    try {
      const data = await api(q ? `/api/knowledge?${new URLSearchParams({ q })}` : "/api/knowledge");
      body.replaceChildren(form, results);
      if (!data.enabled) {
        results.replaceChildren(h("div", { class: "card hint" }, "Memory is turned off (", h("code", null, "memory.enabled"), " is false)."));
        return;
      }
      if (!data.documents.length) {
        results.replaceChildren(h("div", { class: "card hint" }, q ? "No document matches." :
          "No documents yet: add knowledge/<name>/content.md to the workspace or the home, or ask the agent (knowledge_create)."));
        return;
      }
      results.replaceChildren(h("div", { class: "card table-card" }, h("table", { class: "devices knowledge", id: "knowledge-table" },
        h("thead", null, h("tr", null, ["Name", q ? "Match" : "Title", "Source", "Updated", ""].map((t) => h("th", null, t)))),
        h("tbody", null, data.documents.map((d) => row(d, q))))));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  function row(d, q) {
    const view = h("button", { class: "btn small view", type: "button" }, "View");
    view.addEventListener("click", () => open(d.name));
    return h("tr", { dataset: { doc: d.name } },
      h("td", null, h("code", null, d.name)),
      h("td", { class: "skill-desc" }, q ? d.snippet : d.title),
      h("td", null, h("span", { class: "chip" }, d.source)),
      h("td", { class: "muted" }, fmtAgo(d.updated_at)),
      h("td", { class: "actions" }, view));
  }

  async function open(name) {
    try {
      const d = await api(`/api/knowledge/${encodeURIComponent(name)}`);
      const back = h("button", { class: "btn small", type: "button", id: "knowledge-back" }, "Back to the list");
      back.addEventListener("click", load);
      body.replaceChildren(h("div", { class: "card skill-detail", dataset: { doc: d.name } },
        h("div", { class: "check-head" }, d.name, h("span", { class: "chip" }, d.source)),
        h("pre", { id: "knowledge-content", class: "knowledge-content" }, d.content),
        h("div", { class: "skill-actions" }, back)));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show: load };
}
