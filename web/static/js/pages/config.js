// Config: an editor for the allowlisted keys (config_edit.js), then the effective configuration with
// every secret masked by the server (GET /api/config).

import { h } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";
import { editorCard } from "./config_edit.js";

const MASK = "********";

function value(v) {
  if (v === null || v === undefined) return h("span", { class: "v-null" }, "—");
  if (typeof v === "boolean") return h("span", { class: `chip ${v ? "ok" : ""}` }, String(v));
  if (typeof v === "number") return h("span", { class: "v-num" }, String(v));
  if (v === MASK) return h("span", { class: "chip secret", title: "secret, masked" }, "•••••• masked");
  if (typeof v === "string") return h("span", { class: "v-str" }, v === "" ? "\"\"" : v);
  if (Array.isArray(v) && v.every((x) => typeof x !== "object" || x === null)) {
    return v.length ? h("span", { class: "v-list" }, v.map((x) => h("code", null, String(x)))) : h("span", { class: "v-null" }, "[]");
  }
  return null; // nested: rendered as rows
}

function rows(obj, path, out) {
  for (const [key, v] of Object.entries(obj)) {
    const shown = value(v);
    const name = path ? `${path}.${key}` : key;
    if (shown) {
      out.push(h("div", { class: "kv" }, h("code", { class: "k" }, name), h("div", { class: "v" }, shown)));
    } else if (Array.isArray(v)) {
      v.forEach((item, i) => (typeof item === "object" && item !== null ? rows(item, `${name}[${i}]`, out)
        : out.push(h("div", { class: "kv" }, h("code", { class: "k" }, `${name}[${i}]`), h("div", { class: "v" }, value(item))))));
      if (!v.length) out.push(h("div", { class: "kv" }, h("code", { class: "k" }, name), h("div", { class: "v" }, value([]))));
    } else if (Object.keys(v).length === 0) {
      out.push(h("div", { class: "kv" }, h("code", { class: "k" }, name), h("div", { class: "v" }, h("span", { class: "v-null" }, "{}"))));
    } else {
      rows(v, name, out);
    }
  }
  return out;
}

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "config", "Configuration", "The effective configuration; secrets are masked by the server.");

  async function editor(message) {
    try {
      const card = await editorCard((saved) => load(saved));
      if (message) card.querySelector("#cfg-status").replaceChildren(h("span", { class: "ok-text", id: "cfg-saved" }, message));
      return card;
    } catch (err) {
      return h("div", { id: "config-editor" }, errorBox(err));
    }
  }

  async function load(message = null) {
    try {
      const [data, edit] = await Promise.all([api("/api/config"), editor(message)]);
      const cfg = data.config;
      const sections = Object.entries(cfg).sort(([a], [b]) => (a === "_runtime" ? -1 : b === "_runtime" ? 1 : 0));
      body.replaceChildren(
        edit,
        h("p", { class: "muted source" }, "Running with ", h("code", null, data.source || "no file (defaults and environment)")),
        ...sections.map(([name, v]) => h("div", { class: "card config-section", dataset: { section: name } },
          h("h2", null, name === "_runtime" ? "Runtime" : name),
          typeof v === "object" && v !== null && !Array.isArray(v)
            ? (Object.keys(v).length ? h("div", { class: "kvs" }, rows(v, "", [])) : h("p", { class: "muted" }, "(empty)"))
            : h("div", { class: "kvs" }, h("div", { class: "kv" }, h("code", { class: "k" }, name), h("div", { class: "v" }, value(v)))))));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show: () => load() };
}
