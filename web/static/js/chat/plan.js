// The side panel with the current dialog's plan (the `todo` tool's): its title, progress and items with
// their statuses. Hidden while the dialog has no plan; a change of the plan opens it again after the
// user closed it. Frames: `session_plan` (a dialog's plan when the socket starts watching it) and
// `plan_updated` (every change).

import { h, icon } from "../dom.js";

const MARKS = { pending: "○", in_progress: "◐", done: "●", blocked: "!" };
const LABELS = { pending: "pending", in_progress: "in progress", done: "done", blocked: "blocked" };

export class PlanPanel {
  constructor() {
    this.plan = null;
    this.closed = false; // by the user, until the plan changes or another dialog is shown
    this.heading = h("h2", { class: "plan-title", id: "plan-title" });
    this.progress = h("span", { class: "plan-progress", id: "plan-progress" });
    this.list = h("ol", { class: "plan-items", id: "plan-items" });
    const close = h("button", { class: "icon-btn", type: "button", title: "Hide the plan", "aria-label": "Hide the plan" },
      icon("x"));
    close.addEventListener("click", () => { this.closed = true; this.sync(); });
    this.el = h("aside", { class: "plan-panel", id: "plan-panel", "aria-label": "Plan", hidden: true },
      h("div", { class: "plan-head" }, h("div", { class: "plan-head-text" }, this.heading, this.progress), close),
      this.list);
    this.toggle = h("button", { class: "icon-btn plan-toggle", type: "button", id: "plan-toggle", hidden: true,
      title: "Show the plan", "aria-label": "Show the plan" }, icon("list"));
    this.toggle.addEventListener("click", () => { this.closed = !this.closed; this.sync(); });
  }

  // A dialog's plan as the socket sent it; `opened`: it changed (the panel shows it even if closed).
  show(plan, opened) {
    this.plan = plan && Array.isArray(plan.items) ? plan : null;
    if (opened) this.closed = false;
    this.render();
  }

  reset() {
    this.closed = false;
    this.show(null, false);
  }

  render() {
    const plan = this.plan;
    if (plan) {
      const done = plan.items.filter((i) => i.status === "done").length;
      this.heading.textContent = plan.title || "Plan";
      this.progress.textContent = `${done}/${plan.items.length} done`;
      this.list.replaceChildren(...plan.items.map((item) => h("li", { class: "plan-item", dataset: { status: item.status, id: item.id } },
        h("span", { class: "plan-mark", title: LABELS[item.status] || item.status, "aria-label": LABELS[item.status] || item.status },
          MARKS[item.status] || "?"),
        h("span", { class: "plan-text" }, h("span", { class: "plan-item-text" }, item.text),
          item.note ? h("span", { class: "plan-note" }, item.note) : null))));
    } else {
      this.list.replaceChildren();
    }
    this.sync();
  }

  sync() {
    this.el.hidden = !this.plan || this.closed;
    this.toggle.hidden = !this.plan;
    this.toggle.classList.toggle("active", !this.el.hidden);
  }
}
