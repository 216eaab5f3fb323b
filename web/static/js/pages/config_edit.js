// The Config page's editor: the allowlisted keys (GET /api/config/editable), saved with
// PATCH /api/config and If-Match (a file changed meanwhile -> 409, reload and edit again).
// Only the fields you change are sent; an empty text or number field means "back to the default".

import { h } from "../dom.js";
import { api } from "../api.js";

function input(entry) {
  const v = entry.value;
  const attrs = { class: "cfg-input", dataset: { key: entry.key }, "aria-label": entry.key };
  if (entry.kind === "bool") {
    return h("select", attrs, h("option", { value: "true", selected: v === true }, "true"),
      h("option", { value: "false", selected: v === false }, "false"));
  }
  if (entry.kind === "text" || entry.kind === "list") {
    const el = h("textarea", { ...attrs, rows: entry.kind === "text" ? 4 : 2, spellcheck: "false",
      placeholder: entry.kind === "list" ? "one per line" : "default" });
    el.value = entry.kind === "list" ? (v || []).join("\n") : (v ?? "");
    return el;
  }
  const el = h("input", { ...attrs, type: entry.kind === "name" ? "text" : "number", step: entry.kind === "number" ? "any" : "1",
    placeholder: "default" });
  el.value = v ?? "";
  return el;
}

// The field's value as JSON for the API (undefined: unchanged from what was loaded)
function read(entry, el) {
  let v;
  if (entry.kind === "bool") v = el.value === "true";
  else if (entry.kind === "list") v = el.value.split("\n").map((s) => s.trim()).filter(Boolean);
  else if (entry.kind === "int" || entry.kind === "number") v = el.value.trim() === "" ? null : Number(el.value);
  else v = el.value === "" ? null : el.value;
  return JSON.stringify(v) === JSON.stringify(entry.value ?? (entry.kind === "list" ? [] : null)) ? undefined : v;
}

export async function editorCard(onSaved) {
  const data = await api("/api/config/editable");
  const status = h("div", { id: "cfg-status", class: "muted", "aria-live": "polite" });
  const fields = new Map();
  const rows = data.keys.map((entry) => {
    const el = input(entry);
    fields.set(entry.key, { entry, el });
    const who = entry.restart.map((p) => data.processes[p] || p).join(", ");
    return h("div", { class: "kv cfg-row", dataset: { key: entry.key, pending: String(entry.pending) } },
      h("div", { class: "k" }, h("code", null, entry.key),
        h("div", { class: "muted small" }, entry.help),
        h("div", { class: "chips" },
          h("span", { class: "chip", title: "processes that read it at start" }, `restart: ${who}`),
          entry.pending ? h("span", { class: "chip warn", dataset: { role: "pending" } }, "saved, not yet running here") : null,
          entry.in_file ? null : h("span", { class: "chip" }, "default"))),
      h("div", { class: "v" }, el, h("div", { class: "cfg-error bad-text small", dataset: { role: "error" } })));
  });
  const save = h("button", { class: "btn primary small", id: "cfg-save", type: "button" }, "Save changes");
  const reload = h("button", { class: "btn small", id: "cfg-reload", type: "button" }, "Reload");
  reload.addEventListener("click", () => onSaved(null));
  save.addEventListener("click", async () => {
    for (const node of document.querySelectorAll(".cfg-row [data-role=error]")) node.textContent = "";
    const changes = {};
    for (const [key, { entry, el }] of fields) {
      const v = read(entry, el);
      if (v !== undefined) changes[key] = v;
    }
    if (!Object.keys(changes).length) { status.textContent = "Nothing changed."; return; }
    save.disabled = true;
    status.textContent = "Saving…";
    try {
      const done = await api("/api/config", { method: "PATCH", body: changes, headers: { "If-Match": `"${data.version}"` } });
      onSaved(done.message);
    } catch (err) {
      save.disabled = false;
      const body = err.body || {};
      for (const p of body.problems || []) {
        const node = document.querySelector(`.cfg-row[data-key="${CSS.escape(p.key)}"] [data-role=error]`);
        if (node) node.textContent = p.reason;
      }
      status.replaceChildren(h("span", { class: "bad-text", dataset: { code: body.error || "" } }, `Not saved: ${err.message}`),
        err.status === 409 ? h("span", null, " ", reload) : null);
    }
  });
  return h("div", { class: "card config-editor", id: "config-editor", dataset: { version: data.version } },
    h("h2", null, "Edit"),
    h("p", { class: "muted small" }, "Saved to ", h("code", null, data.source), ". ", data.note,
      " Secrets (API keys, tokens) are not editable here."),
    data.file_error ? h("div", { class: "card error-card" }, `The file does not load now: ${data.file_error}`) : null,
    h("div", { class: "kvs" }, rows),
    h("div", { class: "skill-actions" }, save, status));
}
