// The message box: text, image attachments (sent as content blocks), one voice message (recorded
// with the microphone button or an audio file, sent as an `audio` block and heard by the server
// before the turn), Send, Stop, and the choice between steering the running turn (default) and
// queueing for the next one.

import { h, icon } from "../dom.js";

const MAX_IMAGES = 4;
const MAX_IMAGE_CHARS = 700 * 1024; // data URLs above this are scaled down: a frame is ≤ 1 MiB
const MAX_SIDE = 1600;
// A voice message travels base64 in one frame (gateway.max_frame_bytes, 1 MiB by default): about
// 700 KB of audio, several minutes of Opus. Longer recordings are refused here, before sending.
const MAX_AUDIO_CHARS = 960 * 1024;

function recorderType() {
  if (typeof MediaRecorder === "undefined") return null;
  for (const t of ["audio/ogg;codecs=opus", "audio/webm;codecs=opus", "audio/webm", "audio/mp4"]) {
    if (MediaRecorder.isTypeSupported(t)) return t;
  }
  return "";
}

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function shrink(file) {
  const url = await readAsDataUrl(file);
  if (url.length <= MAX_IMAGE_CHARS) return url;
  const bitmap = await createImageBitmap(file);
  let scale = Math.min(1, MAX_SIDE / Math.max(bitmap.width, bitmap.height));
  for (let quality = 0.85; ; quality -= 0.15, scale *= 0.8) {
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(bitmap.width * scale));
    canvas.height = Math.max(1, Math.round(bitmap.height * scale));
    canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    const out = canvas.toDataURL("image/jpeg", Math.max(0.4, quality));
    if (out.length <= MAX_IMAGE_CHARS || quality < 0.3) return out;
  }
}

export class Composer {
  constructor({ onSend, onStop }) {
    this.onSend = onSend;
    this.onStop = onStop;
    this.images = [];
    this.audio = null; // {url, el}: the voice message to send
    this.recording = null; // {recorder, stream, chunks} while the microphone records
    this.mode = "steer";
    this.input = h("textarea", { id: "composer-input", rows: 1, placeholder: "Message PicoBot…",
      "aria-label": "Message", enterkeyhint: "send" });
    this.fileInput = h("input", { type: "file", accept: "image/*,audio/*", multiple: true, hidden: true, id: "attach-input" });
    this.thumbs = h("div", { class: "thumbs" });
    this.attach = h("button", { class: "icon-btn", type: "button", title: "Attach images or an audio file", "aria-label": "Attach images or audio" }, icon("clip"));
    this.micBtn = h("button", { class: "icon-btn mic", type: "button", id: "mic-btn", title: "Record a voice message",
      "aria-label": "Record a voice message", "aria-pressed": "false" }, icon("mic"));
    this.stopBtn = h("button", { class: "btn stop", type: "button", id: "stop-btn", title: "Stop the current turn (/stop)" }, icon("stop"), "Stop");
    this.sendBtn = h("button", { class: "btn primary send", type: "button", id: "send-btn", title: "Send (Enter)" }, icon("send"), h("span", null, "Send"));
    this.steerBtn = h("button", { type: "button", class: "seg active", dataset: { mode: "steer" },
      title: "Add this message to the running turn at its next step" }, "Steer");
    this.queueBtn = h("button", { type: "button", class: "seg", dataset: { mode: "queue" },
      title: "Run this message after the current turn" }, "Queue");
    this.modes = h("div", { class: "modes" }, h("span", { class: "modes-label" }, "While PicoBot works:"),
      h("div", { class: "segmented", role: "group", "aria-label": "While a turn runs" }, this.steerBtn, this.queueBtn));
    this.hint = h("span", { class: "composer-hint" }, "Enter to send · Shift+Enter for a new line");
    this.el = h("div", { class: "composer" },
      this.thumbs,
      h("div", { class: "composer-box" }, this.attach, this.micBtn, this.fileInput, this.input, this.stopBtn, this.sendBtn),
      h("div", { class: "composer-foot" }, this.modes, this.hint));
    this.wire();
    this.setBusy(false);
  }

  wire() {
    this.input.addEventListener("input", () => this.autosize());
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.submit();
      }
    });
    this.input.addEventListener("paste", (e) => {
      const files = [...(e.clipboardData?.files || [])].filter((f) => f.type.startsWith("image/"));
      if (files.length) {
        e.preventDefault();
        this.addFiles(files);
      }
    });
    this.attach.addEventListener("click", () => this.fileInput.click());
    this.micBtn.addEventListener("click", () => (this.recording ? this.stopRecording() : this.startRecording()));
    this.fileInput.addEventListener("change", () => {
      this.addFiles([...this.fileInput.files]);
      this.fileInput.value = "";
    });
    this.sendBtn.addEventListener("click", () => this.submit());
    this.stopBtn.addEventListener("click", () => this.onStop());
    for (const btn of [this.steerBtn, this.queueBtn]) {
      btn.addEventListener("click", () => this.setMode(btn.dataset.mode));
    }
  }

  setMode(mode) {
    this.mode = mode;
    this.steerBtn.classList.toggle("active", mode === "steer");
    this.queueBtn.classList.toggle("active", mode === "queue");
  }

  autosize() {
    // CSSOM, not an inline style attribute: allowed by the CSP. An empty box keeps the CSS
    // height (scrollHeight would count a wrapped placeholder).
    this.input.style.height = "auto";
    if (this.input.value) this.input.style.height = `${Math.min(this.input.scrollHeight, 220)}px`;
  }

  async addFiles(files) {
    const sound = files.find((f) => f.type.startsWith("audio/"));
    if (sound) {
      try {
        this.setAudio(await readAsDataUrl(sound), sound.name);
      } catch (err) {
        console.warn("could not read audio", err);
      }
    }
    for (const file of files.filter((f) => f.type.startsWith("image/"))) {
      if (this.images.length >= MAX_IMAGES) break;
      try {
        const url = await shrink(file);
        const entry = { url };
        entry.el = h("div", { class: "thumb" }, h("img", { src: url, alt: file.name }),
          h("button", { type: "button", class: "thumb-x", title: "Remove", "aria-label": "Remove image",
            onclick: () => { this.images = this.images.filter((x) => x !== entry); entry.el.remove(); } }, icon("x")));
        this.images.push(entry);
        this.thumbs.append(entry.el);
      } catch (err) {
        console.warn("could not read image", err);
      }
    }
  }

  // --- the voice message -----------------------------------------------------------------

  setAudio(url, name = "voice message") {
    // the browser's own type names (audio/x-m4a, audio/wave …) pass; anything else is not audio
    const m = /^data:(audio\/[A-Za-z0-9.+-]{1,64})(?:;[^,]*)?;base64,/.exec(url || "");
    if (!m) return;
    if (url.length > MAX_AUDIO_CHARS) {
      this.flash(`That voice message is too long to send (${Math.round(url.length / 1024)} KB; the limit is about ${Math.round(MAX_AUDIO_CHARS / 1024)} KB). Record a shorter one.`);
      return;
    }
    if (this.audio) this.audio.el.remove();
    const clean = `data:${m[1]};base64,${url.slice(url.indexOf(",") + 1)}`; // no codecs= parameter
    const entry = { url: clean };
    entry.el = h("div", { class: "thumb voice-thumb" }, h("audio", { controls: true, src: clean, title: name }),
      h("button", { type: "button", class: "thumb-x", title: "Remove", "aria-label": "Remove voice message",
        onclick: () => { this.audio = null; entry.el.remove(); } }, icon("x")));
    this.audio = entry;
    this.thumbs.append(entry.el);
  }

  async startRecording() {
    const type = recorderType();
    if (type === null || !navigator.mediaDevices?.getUserMedia) {
      this.flash("This browser cannot record audio here (it needs https or localhost). Attach an audio file instead.");
      return;
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (err) {
      this.flash(`The microphone is not available: ${err.message || err.name}`);
      return;
    }
    const recorder = new MediaRecorder(stream, type ? { mimeType: type } : undefined);
    const chunks = [];
    recorder.addEventListener("dataavailable", (e) => { if (e.data.size) chunks.push(e.data); });
    recorder.addEventListener("stop", async () => {
      for (const track of stream.getTracks()) track.stop();
      const blob = new Blob(chunks, { type: (recorder.mimeType || "audio/webm").split(";")[0] });
      if (blob.size) this.setAudio(await readAsDataUrl(blob), "recording");
    });
    this.recording = { recorder, stream };
    recorder.start();
    this.micBtn.classList.add("recording");
    this.micBtn.setAttribute("aria-pressed", "true");
    this.micBtn.title = "Stop recording";
  }

  stopRecording() {
    const rec = this.recording;
    this.recording = null;
    this.micBtn.classList.remove("recording");
    this.micBtn.setAttribute("aria-pressed", "false");
    this.micBtn.title = "Record a voice message";
    if (rec && rec.recorder.state !== "inactive") rec.recorder.stop();
  }

  flash(text) {
    const el = h("div", { class: "composer-flash", role: "alert" }, text);
    this.thumbs.append(el);
    setTimeout(() => el.remove(), 6000);
  }

  submit() {
    const text = this.input.value.trim();
    if (!text && !this.images.length && !this.audio) return;
    let content = text;
    if (this.images.length || this.audio) {
      content = [...(text ? [{ type: "text", text }] : []), ...this.images.map((i) => ({ type: "image_url", url: i.url })),
        ...(this.audio ? [{ type: "audio", url: this.audio.url }] : [])];
    }
    if (this.onSend(content, this.busy ? this.mode : "steer") === false) return; // not sent: keep the draft
    this.input.value = "";
    this.images = [];
    this.audio = null;
    this.thumbs.replaceChildren();
    this.autosize();
    this.setMode("steer");
  }

  setBusy(busy) {
    this.busy = busy;
    this.stopBtn.hidden = !busy;
    this.modes.hidden = !busy;
    this.hint.hidden = busy;
    this.input.placeholder = busy ? "Add to the running turn…" : "Message PicoBot…";
    this.autosize();
  }

  setConnected(ok) {
    this.sendBtn.disabled = !ok;
    this.el.classList.toggle("offline", !ok);
  }

  focus() {
    this.input.focus();
  }
}
