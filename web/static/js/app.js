// The app shell: sidebar navigation, hash routing between pages, one shared /ws connection.
// Pages are created on first visit and kept (hidden) afterwards, so the chat keeps its
// connection and scroll position while a management page is open.

import { h, icon, clear } from "./dom.js";
import { ChatSocket } from "./socket.js";
import { api } from "./api.js";
import { PAGES, DEFAULT_PAGE } from "./pages.js";
import { pageFrame, errorBox } from "./pages/common.js";
import * as chatPage from "./chat/page.js"; // the default page: loaded with the shell, not on demand

const CHAT_ID_KEY = "picobot.chat_id";

// One chat per browser: a stable id in localStorage, so a reload continues the same chat.
function browserChatId() {
  let id = localStorage.getItem(CHAT_ID_KEY);
  if (!id || !/^[A-Za-z0-9_.@-]{1,128}$/.test(id)) {
    const bytes = crypto.getRandomValues(new Uint8Array(6));
    id = "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    localStorage.setItem(CHAT_ID_KEY, id);
  }
  return id;
}

const root = document.getElementById("app");
const main = document.getElementById("main");
const navMain = document.getElementById("nav-main");
const navManage = document.getElementById("nav-manage");
const statusEl = document.getElementById("conn-status");

const socket = new ChatSocket(browserChatId());
const instances = new Map();
let current = null;

const ctx = {
  chatId: socket.chatId,
  socket,
  dialogsSlot: document.getElementById("dialogs"),
  openNav: () => root.classList.add("nav-open"),
  closeNav: () => root.classList.remove("nav-open"),
  go: (id) => { location.hash = `#/${id}`; },
  // for the pages plugins bring (GET /api/ui/pages): the app's request and DOM helpers, so a page module
  // needs no import of the app's own files
  api,
  h,
  icon,
  pageFrame: (id, title, subtitle) => pageFrame(ctx, id, title, subtitle), // {el, body}: the built-in pages' frame
  errorBox,
};

function addLink(page) {
  const link = h("a", { href: `#/${page.id}`, class: "nav-link", dataset: { page: page.id } },
    icon(page.icon), h("span", null, page.title));
  link.addEventListener("click", () => ctx.closeNav());
  (page.group === "manage" ? navManage : navMain).append(link);
}

function buildNav() {
  for (const page of PAGES) addLink(page);
  document.getElementById("scrim").addEventListener("click", () => ctx.closeNav());
}

// The pages plugins register: listed by the server, each module loaded on first visit like a built-in page.
async function addPluginPages() {
  let pages = [];
  try {
    ({ pages } = await api("/api/ui/pages"));
  } catch {
    return; // the built-in pages work without them
  }
  for (const p of pages || []) {
    if (!/^[\w-]+$/.test(p.id) || PAGES.some((q) => q.id === p.id)) continue;
    const page = { id: p.id, title: p.title, icon: p.icon, group: p.group === "main" ? "main" : "manage",
                   load: () => import(p.src) };
    PAGES.push(page);
    addLink(page);
  }
}

async function instance(page) {
  let inst = instances.get(page.id);
  if (!inst) {
    const mod = await page.load();
    inst = instances.get(page.id) || mod.createPage(ctx);
    instances.set(page.id, inst);
  }
  return inst;
}

async function show(id) {
  const page = PAGES.find((p) => p.id === id) || PAGES.find((p) => p.id === DEFAULT_PAGE);
  const inst = await instance(page);
  if (current === inst) return;
  if (current) {
    current.hide?.();
    current.el.remove();
  }
  current = inst;
  main.append(inst.el);
  inst.show?.();
  document.title = page.id === DEFAULT_PAGE ? "PicoBot" : `${page.title} · PicoBot`;
  for (const link of document.querySelectorAll(".nav-link")) {
    link.classList.toggle("active", link.dataset.page === page.id);
    if (link.dataset.page === page.id) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route() {
  const id = (location.hash.match(/^#\/([\w-]+)/) || [])[1] || DEFAULT_PAGE;
  show(id).catch((err) => {
    // A page's module is behind pairing too: if we were unpaired meanwhile, api() reloads into /pair.
    api("/api/me").catch(() => {});
    clear(main).append(h("div", { class: "page-error" }, `Could not open this page: ${err.message}`));
  });
}

const STATUS_TEXT = { open: "Connected", connecting: "Connecting…", reconnecting: "Reconnecting…" };

function showStatus(status) {
  clear(statusEl).append(h("span", { class: `dot ${status === "open" ? "ok" : "warn"}` }),
    h("span", null, STATUS_TEXT[status] || status));
  root.dataset.conn = status;
}

socket.on("status", showStatus);
// Repeated failures to connect: if this browser was unpaired (revoked), show the pairing page.
socket.on("check-auth", () => { api("/api/me").catch(() => {}); });

buildNav();
showStatus("connecting");
// The chat page listens before we connect, so the first `ready` frame is never missed.
instances.set(DEFAULT_PAGE, chatPage.createPage(ctx));
socket.connect();
window.addEventListener("hashchange", route);
route();
addPluginPages().then(() => { if (location.hash.match(/^#\/[\w-]+-[\w-]+/)) route(); });
