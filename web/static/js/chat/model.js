// The chat header's model picker: which of its agent's models the current dialog uses.
// It speaks the /model command over the socket (docs/PROTOCOL.md): `/model` reads the choices,
// `/model <provider>:<model>` or `/model default` switches; the choice is stored with the dialog.

import { h } from "../dom.js";

const DEFAULT = "default";

export class ModelPicker {
  // command(text) -> Promise of the command's reply frame; notice(text, kind) shows a refusal.
  constructor({ command, notice }) {
    this.command = command;
    this.notice = notice;
    this.sessionId = null;
    this.state = null;
    this.select = h("select", { class: "model-select", id: "model-picker", "aria-label": "Model of this dialog" });
    this.select.addEventListener("change", () => this.choose(this.select.value));
    this.el = h("div", { class: "model-picker", hidden: true }, this.select);
  }

  // The dialog changed (or a turn ended): read its model again. A reply for another dialog is ignored.
  refresh(sessionId) {
    this.sessionId = sessionId;
    return this.command("/model").then((f) => this.render(f && f.data)).catch(() => {});
  }

  render(state) {
    if (!state || !Array.isArray(state.choices) || state.session_id !== this.sessionId) return;
    this.state = state;
    const options = state.choices.map((c) => {
      const label = `${c.ref} · ${c.model_id}` + (c.default ? " (default)" : "")
        + (c.profiles && c.profiles.length ? ` [${c.profiles.join(", ")}]` : "");
      // the agent's own model is chosen as "default": the dialog then follows the agent's default
      return h("option", { value: c.default ? DEFAULT : c.ref, selected: c.current, dataset: { ref: c.ref } }, label);
    });
    this.select.replaceChildren(...options);
    this.select.disabled = options.length < 2;
    this.select.title = state.model
      ? `Model of this dialog: ${state.model} (${state.model_chosen ? "chosen for this dialog" : "the agent's default"})`
      : "No model is configured";
    this.el.hidden = options.length === 0;
    this.el.dataset.chosen = state.model_chosen ? "1" : "0";
    this.el.dataset.model = state.model || "";
  }

  choose(value) {
    const asked = this.sessionId;
    this.select.disabled = true;
    this.command(`/model ${value}`).then((f) => {
      if (f && f.code) this.notice(f.text || f.code, "warn");
      if (asked === this.sessionId) this.render(f && f.data);
    }).catch(() => this.refresh(this.sessionId)).finally(() => {
      this.select.disabled = this.select.options.length < 2;
    });
  }
}
