// Devices: paired browsers and terminals (GET /api/pairing/devices), with revocation.

import { h, fmtAgo, fmtTime } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "devices", "Paired devices", "Browsers and terminals that may use PicoBot.");

  function revokeButton(device) {
    const btn = h("button", { class: "btn danger small", type: "button" }, device.current ? "Unpair this browser" : "Revoke");
    btn.addEventListener("click", async () => {
      if (!btn.classList.contains("confirm")) {
        btn.classList.add("confirm");
        btn.textContent = "Click to confirm";
        setTimeout(() => { btn.classList.remove("confirm"); btn.textContent = device.current ? "Unpair this browser" : "Revoke"; }, 3000);
        return;
      }
      btn.disabled = true;
      try {
        const res = await api(`/api/pairing/devices/${encodeURIComponent(device.id)}`, { method: "DELETE" });
        if (res.self) location.reload(); // we just unpaired ourselves: show the pairing page
        else load();
      } catch (err) {
        btn.disabled = false;
        btn.textContent = `Failed: ${err.message}`;
      }
    });
    return btn;
  }

  async function load() {
    try {
      const { devices } = await api("/api/pairing/devices");
      body.replaceChildren(
        h("div", { class: "card hint" }, "To pair another device, run ", h("code", null, "picobot pair"),
          " on the server and open the URL it prints on that device."),
        h("div", { class: "card table-card" }, h("table", { class: "devices", id: "devices-table" },
          h("thead", null, h("tr", null, ["Name", "Kind", "Paired", "Last used", ""].map((t) => h("th", null, t)))),
          h("tbody", null, devices.map((d) => h("tr", { dataset: { device: d.id } },
            h("td", null, h("div", { class: "device-name" }, d.name, d.current ? h("span", { class: "chip ok" }, "this browser") : null),
              h("code", { class: "muted small" }, d.id)),
            h("td", null, h("span", { class: "chip" }, d.kind)),
            h("td", { title: fmtTime(d.created_at) }, fmtAgo(d.created_at)),
            h("td", { title: fmtTime(d.last_used_at) }, fmtAgo(d.last_used_at)),
            h("td", { class: "actions" }, revokeButton(d))))))));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show: load };
}
