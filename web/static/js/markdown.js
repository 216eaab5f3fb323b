// A small Markdown renderer that builds DOM nodes, never HTML strings.
//
// Why our own: model output is untrusted. Libraries that produce an HTML string need a
// sanitizer to be safe; here there is no string to sanitize. Raw HTML in the source is shown
// as text, every piece of text enters the page through a text node, and a link becomes an
// <a> only when its URL parses as an absolute http:, https: or mailto: URL.
//
// Supported: paragraphs (single newlines are line breaks), # headings, fenced code with a
// language label, > quotes, - / 1. lists (nested, task boxes), tables, --- rules, **bold**,
// *italic*, ~~strike~~, `code`, [links](url), <autolinks>, bare URLs; images become links.

import { h, icon } from "./dom.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_SEP = /^ *\|? *:?-+:? *(?:\| *:?-+:? *)*\|? *$/;
const SAFE_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

export function safeUrl(raw) {
  const text = String(raw || "").trim();
  // Browsers drop tabs/newlines inside a scheme ("java\tscript:"); refuse any control character.
  if (!text || /[\u0000-\u001f\u007f]/.test(text)) return null;
  let url;
  try {
    url = new URL(text); // absolute URLs only: no relative paths into our own app
  } catch {
    return null;
  }
  return SAFE_PROTOCOLS.has(url.protocol) ? url.href : null;
}

export function renderMarkdown(source) {
  const frag = document.createDocumentFragment();
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  parseBlocks(lines, frag);
  return frag;
}

function startsBlock(line, next) {
  return FENCE.test(line) || HEADING.test(line) || HR.test(line) || QUOTE.test(line) || ITEM.test(line) ||
    (line.includes("|") && next !== undefined && TABLE_SEP.test(next) && next.includes("-"));
}

function parseBlocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const closes = (l) => { const t = l.trim(); return t.length >= fence.length && t === fence[0].repeat(t.length); };
      const body = [];
      i++;
      while (i < lines.length && !closes(lines[i])) body.push(lines[i++]);
      i++; // the closing fence (or the end)
      parent.append(codeBlock(m[2], body.join("\n")));
    } else if ((m = HEADING.exec(line))) {
      parent.append(h(`h${Math.min(m[1].length + 2, 6)}`, { class: "md-h" }, inline(m[2])));
      i++;
    } else if (HR.test(line)) {
      parent.append(h("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ""));
      const quote = h("blockquote");
      parseBlocks(body, quote);
      parent.append(quote);
    } else if (ITEM.test(line)) {
      i = parseList(lines, i, parent);
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      i = parseTable(lines, i, parent);
    } else {
      const para = [line];
      i++;
      while (i < lines.length && lines[i].trim() && !startsBlock(lines[i], lines[i + 1])) para.push(lines[i++]);
      parent.append(h("p", null, inline(para.map((l) => l.trim()).join("\n"))));
    }
  }
}

function parseList(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const list = ordered ? h("ol") : h("ul");
  if (ordered && parseInt(first[2], 10) !== 1) list.start = parseInt(first[2], 10);
  const items = [];
  let current = null;
  let contentIndent = 0;
  while (i < lines.length) {
    const line = lines[i];
    const m = ITEM.exec(line);
    if (m && m[1].length <= indent + 1 && /\d/.test(m[2]) === ordered) {
      current = [m[3] || ""];
      items.push(current);
      contentIndent = m[1].length + m[2].length + 1;
      i++;
    } else if (!line.trim()) {
      const next = lines[i + 1];
      if (next === undefined || !next.trim()) break;
      const nextIndent = next.length - next.trimStart().length;
      const nm = ITEM.exec(next);
      if (nextIndent > indent || (nm && nm[1].length <= indent + 1 && /\d/.test(nm[2]) === ordered)) {
        current.push("");
        i++;
      } else break;
    } else {
      const lead = line.length - line.trimStart().length;
      if (lead > indent) current.push(line.slice(Math.min(lead, contentIndent)));
      else if (m || startsBlock(line, lines[i + 1]) || current[current.length - 1] === "") break;
      else current.push(line.trim()); // lazy continuation of the item's paragraph
      i++;
    }
  }
  for (const body of items) {
    const li = h("li");
    let text = body[0];
    const task = /^\[([ xX])\][ \t]+/.exec(text);
    if (task) {
      li.className = "task";
      li.append(h("input", { type: "checkbox", disabled: true, checked: task[1] !== " " }));
      body[0] = text.slice(task[0].length);
    }
    const holder = document.createDocumentFragment();
    parseBlocks(body, holder);
    // A tight item (no blank line inside) shows its text without paragraph spacing.
    if (!body.slice(0, -1).includes("")) {
      for (const p of [...holder.childNodes].filter((n) => n.nodeName === "P")) p.replaceWith(...p.childNodes);
    }
    li.append(holder);
    list.append(li);
  }
  parent.append(list);
  return i;
}

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  const cells = [];
  let cell = "";
  for (let k = 0; k < row.length; k++) {
    if (row[k] === "\\" && row[k + 1] === "|") { cell += "|"; k++; continue; }
    if (row[k] === "|") { cells.push(cell.trim()); cell = ""; continue; }
    cell += row[k];
  }
  cells.push(cell.trim());
  return cells;
}

function parseTable(lines, i, parent) {
  const head = splitRow(lines[i]);
  const aligns = splitRow(lines[i + 1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : "left"));
  i += 2;
  const cell = (tag, text, k) => h(tag, { class: `align-${aligns[k] || "left"}` }, inline(text));
  const thead = h("thead", null, h("tr", null, head.map((c, k) => cell("th", c, k))));
  const tbody = h("tbody");
  while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
    const cells = splitRow(lines[i++]);
    tbody.append(h("tr", null, head.map((_, k) => cell("td", cells[k] || "", k))));
  }
  parent.append(h("div", { class: "table-wrap" }, h("table", null, thead, tbody)));
  return i;
}

function codeBlock(lang, text) {
  const code = h("code", { class: lang ? `lang-${lang.replace(/[^\w+#-]/g, "")}` : "" }, text);
  const copy = h("button", { class: "icon-btn copy", type: "button", title: "Copy code", "aria-label": "Copy code" }, icon("copy"));
  copy.addEventListener("click", () => {
    navigator.clipboard?.writeText(text).then(() => {
      copy.classList.add("done");
      setTimeout(() => copy.classList.remove("done"), 1200);
    }, () => {});
  });
  return h("div", { class: "code" }, h("div", { class: "code-head" }, h("span", null, lang || "text"), copy), h("pre", null, code));
}

// --- inline ---------------------------------------------------------------------------------

const ESCAPABLE = "\\`*_{}[]()#+-.!|~<>\"'";
const BARE_URL = /^(?:https?:\/\/|mailto:)[^\s<>"]+/;

// A bare URL ends before trailing punctuation, and before a ")" that closes nothing in it (GFM).
function trimUrl(url) {
  for (;;) {
    const last = url[url.length - 1];
    if (".,:;!?*_~'\"]".includes(last)) url = url.slice(0, -1);
    else if (last === ")" && url.split(")").length > url.split("(").length) url = url.slice(0, -1);
    else return url;
  }
}

function link(href, children) {
  return h("a", { href, target: "_blank", rel: "noopener noreferrer nofollow", title: href }, children);
}

// The index of the `]` closing the `[` at `open` (brackets nest), or -1.
function closeBracket(text, open) {
  let depth = 0;
  for (let k = open; k < text.length; k++) {
    if (text[k] === "\\") { k++; continue; }
    if (text[k] === "[") depth++;
    else if (text[k] === "]" && --depth === 0) return k;
  }
  return -1;
}

// `(url "title")` starting at `open`: [url, end index] or null. Parentheses in URLs may nest.
function linkTarget(text, open) {
  if (text[open] !== "(") return null;
  let depth = 0;
  for (let k = open; k < text.length; k++) {
    if (text[k] === "\\") { k++; continue; }
    if (text[k] === "(") depth++;
    else if (text[k] === ")" && --depth === 0) {
      let target = text.slice(open + 1, k).trim();
      const titled = /^(\S+)\s+["'(].*["')]$/.exec(target);
      if (titled) target = titled[1];
      if (target.startsWith("<") && target.endsWith(">")) target = target.slice(1, -1);
      return [target, k];
    }
  }
  return null;
}

function emphasisEnd(text, from, delim) {
  for (let k = from; k <= text.length - delim.length; k++) {
    if (text[k] === "\\") { k++; continue; }
    if (text[k] === "`") { // code spans win over emphasis
      const run = /^`+/.exec(text.slice(k))[0];
      const end = text.indexOf(run, k + run.length);
      if (end > 0) { k = end + run.length - 1; continue; }
    }
    if (text.startsWith(delim, k) && !/\s/.test(text[k - 1]) && k > from) {
      if (delim.length === 1 && text[k + 1] === delim) { k++; continue; } // part of ** / __
      if (delim === "_" && /[\p{L}\p{N}]/u.test(text[k + 1] || "")) continue; // snake_case_word
      return k;
    }
  }
  return -1;
}

export function inline(text) {
  const out = [];
  let buf = "";
  const flush = () => { if (buf) { out.push(document.createTextNode(buf)); buf = ""; } };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const rest = text.slice(i);
    if (c === "\\" && i + 1 < text.length && ESCAPABLE.includes(text[i + 1])) {
      buf += text[i + 1]; i += 2; continue;
    }
    if (c === "\n") { flush(); out.push(h("br")); i++; continue; }
    if (c === "`") {
      const run = /^`+/.exec(rest)[0];
      const end = text.indexOf(run, i + run.length);
      if (end > 0) {
        flush();
        out.push(h("code", null, text.slice(i + run.length, end).replace(/^ (.+) $/, "$1")));
        i = end + run.length; continue;
      }
      buf += run; i += run.length; continue;
    }
    if (c === "[" || (c === "!" && text[i + 1] === "[")) {
      const open = c === "!" ? i + 1 : i;
      const close = closeBracket(text, open);
      const target = close > 0 ? linkTarget(text, close + 1) : null;
      if (target) {
        const label = text.slice(open + 1, close);
        const href = safeUrl(target[0]);
        flush();
        if (c === "!") out.push(href ? link(href, ["🖼 ", label || "image"]) : document.createTextNode(label));
        else out.push(href ? link(href, inline(label)) : h("span", { class: "unsafe-link", title: "link removed" }, inline(label)));
        i = target[1] + 1; continue;
      }
    }
    if (c === "<") {
      const auto = /^<((?:https?|mailto):[^\s<>]+)>/.exec(rest);
      const href = auto && safeUrl(auto[1]);
      if (href) { flush(); out.push(link(href, auto[1])); i += auto[0].length; continue; }
    }
    if ((c === "h" || c === "m") && !/[\p{L}\p{N}]/u.test(text[i - 1] || "")) {
      const bare = BARE_URL.exec(rest);
      const url = bare && trimUrl(bare[0]);
      const href = url && /[/:][^/:]/.test(url) && safeUrl(url);
      if (href) { flush(); out.push(link(href, url)); i += url.length; continue; }
    }
    if (c === "*" || c === "_" || c === "~") {
      const delim = rest.startsWith(c + c) ? c + c : c;
      const canOpen = text[i + delim.length] && !/\s/.test(text[i + delim.length]) &&
        !(c === "_" && /[\p{L}\p{N}]/u.test(text[i - 1] || ""));
      if (canOpen && !(c === "~" && delim.length === 1)) {
        const end = emphasisEnd(text, i + delim.length, delim);
        if (end > 0) {
          flush();
          const tag = c === "~" ? "del" : delim.length === 2 ? "strong" : "em";
          out.push(h(tag, null, inline(text.slice(i + delim.length, end))));
          i = end + delim.length; continue;
        }
      }
      buf += delim; i += delim.length; continue;
    }
    buf += c; i++;
  }
  flush();
  return out;
}
