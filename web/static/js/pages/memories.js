// Memories: what the agent remembers per user scope (GET /api/memories/scopes, /api/memories);
// search, filter by scope and namespace, view one with its source (GET /api/memories/<id>),
// edit its content and importance (PUT) or delete it (DELETE).

import { h, fmtAgo } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "memories", "Memories", "Facts the agent keeps about each user, across chats.");
  const scope = h("select", { id: "memory-scope" });
  const namespace = h("input", { id: "memory-namespace", placeholder: "namespace (all)", type: "text" });
  const query = h("input", { id: "memory-query", placeholder: "Search words…", type: "search" });
  const results = h("div", { id: "memory-results" });
  const form = h("form", { class: "card memory-filters" }, scope, " ", namespace, " ", query, " ",
    h("button", { class: "btn small", type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); search(); });
  scope.addEventListener("change", search);

  async function show() {
    try {
      const data = await api("/api/memories/scopes");
      if (!data.enabled) {
        body.replaceChildren(h("div", { class: "card hint" }, "Memory is turned off (", h("code", null, "memory.enabled"), " is false)."));
        return;
      }
      const current = scope.value;
      scope.replaceChildren(...data.scopes.map((s) => h("option", { value: s.scope_key }, `${s.scope_key} (${s.count})`)));
      if (current && data.scopes.some((s) => s.scope_key === current)) scope.value = current;
      body.replaceChildren(form, results);
      if (!data.scopes.length) {
        results.replaceChildren(h("div", { class: "card hint" }, "No memories yet: the agent saves them with memory_manage."));
        return;
      }
      search();
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  async function search() {
    const params = new URLSearchParams({ scope_key: scope.value });
    if (namespace.value.trim()) params.set("namespace", namespace.value.trim());
    if (query.value.trim()) params.set("q", query.value.trim());
    try {
      const data = await api(`/api/memories?${params}`);
      results.replaceChildren(h("div", { class: "card table-card" }, h("table", { class: "devices memories", id: "memories-table" },
        h("thead", null, h("tr", null, ["Key", "Content", "Category", "Importance", "Updated", ""].map((t) => h("th", null, t)))),
        h("tbody", null, data.memories.map(row)))));
    } catch (err) {
      results.replaceChildren(errorBox(err));
    }
  }

  function row(m) {
    const view = h("button", { class: "btn small view", type: "button" }, "View");
    view.addEventListener("click", () => open(m.id));
    return h("tr", { dataset: { memory: String(m.id) } },
      h("td", null, h("code", null, `${m.namespace}/${m.memory_key}`)),
      h("td", { class: "memory-content" }, m.content),
      h("td", null, h("span", { class: "chip" }, m.category)),
      h("td", null, m.importance.toFixed(2)),
      h("td", { class: "muted" }, fmtAgo(m.updated_at)),
      h("td", { class: "actions" }, view));
  }

  async function open(id) {
    try {
      const m = await api(`/api/memories/${id}`);
      const editor = h("textarea", { id: "memory-editor", class: "skill-editor", spellcheck: "false" });
      editor.value = m.content;
      const importance = h("input", { id: "memory-importance", type: "number", min: "0", max: "1", step: "0.05", value: String(m.importance) });
      const status = h("span", { id: "memory-status", class: "muted" });
      const save = h("button", { class: "btn primary small", id: "memory-save", type: "button" }, "Save");
      save.addEventListener("click", async () => {
        save.disabled = true;
        try {
          await api(`/api/memories/${id}`, { method: "PUT", body: { content: editor.value, importance: Number(importance.value) } });
          status.textContent = `Saved ${fmtAgo(Date.now() / 1000)}.`;
        } catch (err) {
          status.textContent = `Not saved: ${err.message}`;
        } finally {
          save.disabled = false;
        }
      });
      const del = h("button", { class: "btn small danger", id: "memory-delete", type: "button" }, "Delete");
      del.addEventListener("click", async () => {
        if (!window.confirm(`Delete ${m.namespace}/${m.memory_key}?`)) return;
        try {
          await api(`/api/memories/${id}`, { method: "DELETE" });
          show();
        } catch (err) {
          status.textContent = `Not deleted: ${err.message}`;
        }
      });
      const back = h("button", { class: "btn small", type: "button", id: "memory-back" }, "Back to the list");
      back.addEventListener("click", () => { body.replaceChildren(form, results); search(); });
      const src = m.source;
      body.replaceChildren(h("div", { class: "card skill-detail", dataset: { memory: String(m.id) } },
        h("div", { class: "check-head" }, `${m.namespace}/${m.memory_key}`, h("span", { class: "chip" }, m.category)),
        h("p", { class: "muted small", id: "memory-source" }, `Scope ${m.scope_key} · written by ${src.source_type}`,
          src.session_id ? ` in ${src.session_id}` : "", src.seq != null ? ` (message #${src.seq})` : "",
          ` · ${fmtAgo(m.updated_at)}`),
        m.source_messages.length ? h("blockquote", { class: "memory-said" }, m.source_messages.map((s) => h("p", null, s.text))) : null,
        editor,
        h("label", { class: "muted small" }, "Importance (0–1) ", importance),
        h("div", { class: "skill-actions" }, back, save, del, status)));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show };
}
