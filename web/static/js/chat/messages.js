// Rendering of a dialog: stored history (true order of user / assistant / tool messages)
// and live turn snapshots. Everything goes through h() and renderMarkdown(): no HTML strings.

import { h, icon } from "../dom.js";
import { renderMarkdown, safeUrl } from "../markdown.js";

const FINAL = new Set(["completed", "cancelled", "failed", "interrupted", "budget_exceeded"]);
const FATE_TEXT = { sending: "sending…", started: "started", steered: "steered into the running turn",
  queued: "queued for the next turn", rejected: "rejected", duplicate: "already received", lost: "connection lost" };

export function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((b) => b && b.type === "text").map((b) => b.text).join("\n");
}

function imagesOf(content) {
  if (!Array.isArray(content)) return [];
  return content.filter((b) => b && b.type === "image_url" && typeof b.url === "string")
    .map((b) => (/^data:image\/(png|jpe?g|gif|webp);base64,/i.test(b.url) ? b.url : safeUrl(b.url)))
    .filter(Boolean);
}

function audiosOf(content) {
  if (!Array.isArray(content)) return [];
  return content.filter((b) => b && b.type === "audio" && typeof b.url === "string" && /^data:audio\/[A-Za-z0-9.+-]+;base64,/.test(b.url))
    .map((b) => b.url);
}

// A voice message's stored text starts with this mark: it is the transcript.
export const SPOKEN_MARK = "🎤 ";

// The spoken copy of an answer to a voice message (voice.tts): made by the server when played.
export function speechPlayer(messageId) {
  return h("div", { class: "speech" }, icon("speaker"),
    h("audio", { controls: true, preload: "none", src: `/api/speech/${encodeURIComponent(messageId)}`, title: "Spoken answer" }));
}

function prettyJson(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function fateChip(fate, detail) {
  if (!fate) return null;
  return h("span", { class: `chip fate fate-${fate}`, title: detail || FATE_TEXT[fate] || fate }, FATE_TEXT[fate] || fate);
}

export function userBubble(content, { fate, detail, time } = {}) {
  const images = imagesOf(content);
  const audios = audiosOf(content);
  return h("div", { class: "msg user", title: time ? new Date(time * 1000).toLocaleString() : null },
    h("div", { class: "bubble" },
      images.length ? h("div", { class: "attachments" }, images.map((src) => h("img", { class: "attachment", src, alt: "attached image", loading: "lazy" }))) : null,
      audios.length ? h("div", { class: "attachments voice" }, h("span", { class: "voice-label" }, "🎤 Voice message"),
        audios.map((src) => h("audio", { controls: true, src, preload: "none" }))) : null,
      h("div", { class: "user-text" }, textOf(content))),
    fate ? h("div", { class: "fate-row" }, fateChip(fate, detail), detail && fate === "rejected" ? h("span", { class: "fate-detail" }, detail) : null) : null);
}

export class ToolView {
  constructor({ name, id }) {
    this.id = id;
    this.status = h("span", { class: "chip status" });
    this.preview = h("span", { class: "tool-preview" });
    this.args = h("pre", { class: "tool-args" });
    this.result = h("pre", { class: "tool-result" });
    this.resultLabel = h("div", { class: "tool-label" }, "Result");
    this.resultLabel.hidden = this.result.hidden = true;
    this.name = h("span", { class: "tool-name" }, name || "tool");
    this.el = h("details", { class: "tool", dataset: { status: "pending" } },
      h("summary", null, icon("tool", "icon tool-icon"), this.name, this.preview, this.status),
      h("div", { class: "tool-body" }, h("div", { class: "tool-label" }, "Arguments"), this.args, this.resultLabel, this.result));
  }

  update({ name, args, status, result, isError }) {
    if (name) this.name.textContent = name;
    if (args !== undefined) {
      this.args.textContent = prettyJson(args) || "{}";
      this.preview.textContent = String(args).replace(/\s+/g, " ").slice(0, 80);
    }
    if (result !== undefined && result !== null) {
      this.result.textContent = result;
      this.resultLabel.hidden = this.result.hidden = false;
    }
    const st = isError ? "error" : status;
    if (st) {
      this.el.dataset.status = st;
      this.status.textContent = { pending: "preparing", running: "running…", done: "done", error: "error" }[st] || st;
    }
  }
}

function reasoningBlock(text, open = false) {
  const body = h("div", { class: "reasoning-body" }, text);
  const el = h("details", { class: "reasoning", open }, h("summary", null, icon("brain"), "Reasoning"), body);
  return { el, body };
}

function markdownBlock(text) {
  return h("div", { class: "md" }, renderMarkdown(text));
}

// One stored message -> elements. `tools` maps tool call id -> ToolView so that a tool
// result (role "tool") lands inside the block of the call that asked for it.
export function renderStored(msg, tools) {
  const time = msg.created_at;
  if (msg.role === "user") return userBubble(msg.content, { time });
  if (msg.role === "system") {
    if (msg.marker === "host_moved") return h("div", { class: "notice host-moved" }, textOf(msg.content));
    return msg.marker === "history_compaction" ? h("div", { class: "notice" }, "Earlier messages were summarised to save context.") : null;
  }
  if (msg.role === "tool") {
    const known = tools.get(msg.tool_call_id);
    const view = known || new ToolView({ name: msg.name, id: msg.tool_call_id });
    view.update({ status: msg.is_error ? "error" : "done", result: textOf(msg.content), isError: msg.is_error });
    return known ? null : h("div", { class: "msg assistant" }, view.el);
  }
  if (msg.marker === "turn_error") return h("div", { class: "notice error" }, textOf(msg.content));
  if (msg.marker === "turn_stopped") return h("div", { class: "notice" }, "Stopped.");
  const el = h("div", { class: "msg assistant", title: time ? new Date(time * 1000).toLocaleString() : null });
  if (msg.marker === "session_message") el.append(h("div", { class: "msg-label" }, "Delivered message"));
  if (msg.reasoning_content) el.append(reasoningBlock(msg.reasoning_content).el);
  const text = textOf(msg.content);
  if (text.trim()) el.append(markdownBlock(text));
  for (const src of imagesOf(msg.content)) el.append(h("img", { class: "attachment", src, alt: "image", loading: "lazy" }));
  for (const call of msg.tool_calls || []) {
    const view = new ToolView(call);
    view.update({ name: call.name, args: call.arguments, status: "running" });
    tools.set(call.id, view);
    el.append(view.el);
  }
  return el;
}

// A running (or just finished) turn, updated in place from full snapshots.
export class LiveTurn {
  constructor(turnId) {
    this.turnId = turnId;
    this.views = [];
    this.revision = -1;
    this.status = "running";
    this.blocksEl = h("div", { class: "live-blocks" });
    this.footer = h("div", { class: "live-status" });
    this.el = h("div", { class: "turn live", dataset: { turn: turnId } }, this.blocksEl, this.footer);
  }

  update(snap, fates) {
    if (snap.revision <= this.revision) return false; // frames may be coalesced, never go back
    this.revision = snap.revision;
    this.status = snap.status;
    const blocks = snap.blocks || [];
    if (blocks.length < this.views.length) { // cannot happen for one turn; rebuild to be safe
      this.views = [];
      this.blocksEl.replaceChildren();
    }
    blocks.forEach((block, i) => {
      let view = this.views[i];
      if (!view || view.type !== block.type) {
        view = this.createView(block);
        if (this.views[i]) this.views[i].el.replaceWith(view.el);
        else this.blocksEl.append(view.el);
        this.views[i] = view;
      }
      this.updateView(view, block, fates, i === blocks.length - 1);
    });
    this.el.classList.toggle("running", !FINAL.has(snap.status));
    this.renderFooter(blocks);
    return true;
  }

  createView(block) {
    if (block.type === "user") return { type: "user", el: h("div"), fate: undefined };
    if (block.type === "reasoning") {
      const r = reasoningBlock("", true);
      return { type: "reasoning", el: r.el, body: r.body, text: "" };
    }
    if (block.type === "tool") {
      const tool = new ToolView(block);
      return { type: "tool", el: h("div", { class: "msg assistant" }, tool.el), tool };
    }
    return { type: block.type, el: h("div", { class: "msg assistant" }, h("div", { class: "md" })), text: null };
  }

  updateView(view, block, fates, last) {
    if (view.type === "user") {
      const fate = fates.get(block.seq);
      if (view.text !== block.text || view.fate !== fate) {
        const bubble = userBubble(block.text, { fate: fate && fate !== "started" ? fate : undefined });
        view.el.replaceWith(bubble);
        view.el = bubble;
        view.text = block.text;
        view.fate = fate;
      }
    } else if (view.type === "reasoning") {
      if (view.text !== block.text) view.body.textContent = view.text = block.text;
      if (!last && !view.closed) { view.el.open = false; view.closed = true; } // done thinking: fold it
    } else if (view.type === "tool") {
      view.tool.update({ name: block.name, args: block.arguments, status: block.status, result: block.result });
    } else if (view.text !== block.text) {
      view.text = block.text;
      const md = view.el.firstChild;
      md.replaceChildren(renderMarkdown(block.text || ""));
    }
    if (view.type === "text") view.el.classList.toggle("streaming", last && !FINAL.has(this.status));
  }

  renderFooter(blocks) {
    const last = blocks[blocks.length - 1];
    let text = "";
    if (this.status === "running") {
      if (last && last.type === "tool" && last.status !== "done") text = `Running ${last.name || "a tool"}…`;
      else if (!last || last.type === "user") text = "Thinking…";
      else if (last.type === "reasoning") text = "Reasoning…";
    } else if (this.status === "cancelled") text = "Stopped.";
    else if (this.status === "failed") text = "The turn failed.";
    else if (this.status === "budget_exceeded") text = "Refused by a budget.";
    else if (this.status === "interrupted") text = "Interrupted; it will be retried.";
    this.footer.replaceChildren(...(text ? [this.status === "running" ? h("span", { class: "spinner" }) : null, text].filter(Boolean) : []));
    this.footer.hidden = !text;
  }
}

export { FINAL, FATE_TEXT };
