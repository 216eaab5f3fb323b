// Shared frame of a management page: a header with a menu button (phones), a title, and a body.

import { h, icon } from "../dom.js";

export function pageFrame(ctx, id, title, subtitle) {
  const menu = h("button", { class: "icon-btn menu-btn", type: "button", "aria-label": "Open navigation" }, icon("menu"));
  menu.addEventListener("click", () => ctx.openNav());
  const side = h("div", { class: "page-head-side" });
  const body = h("div", { class: "page-body" });
  const el = h("section", { class: `page manage-page ${id}-page`, id: `${id}-page` },
    h("header", { class: "page-head" }, menu,
      h("div", { class: "page-title-wrap" }, h("h1", null, title), subtitle ? h("p", { class: "muted" }, subtitle) : null),
      side),
    h("div", { class: "page-scroll" }, body));
  return { el, body, side };
}

export function errorBox(err) {
  return h("div", { class: "card error-card" }, `Could not load: ${err.message || err}`);
}
