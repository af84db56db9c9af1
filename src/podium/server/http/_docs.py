"""The page at ``/v2/docs``: the operations of this listener's OpenAPI document, each with a form
that sends a request and shows the answer (streams as they arrive).

Self-contained on purpose: no script, style or font from anywhere else (it works offline and
behind any proxy, and trusts no third party), and written here rather than copied from an
OpenAPI UI. It reads ``openapi.json`` beside its own path and writes what it shows with
``textContent`` only, so nothing in the document or an answer is ever run as markup.
"""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Podium API</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 60em; padding: 0 1em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; border-bottom: 1px solid #ccc; }
details { border: 1px solid #ddd; border-radius: 4px; margin: .4em 0; padding: .3em .6em; }
summary { cursor: pointer; } code, textarea, pre { font: 13px ui-monospace, monospace; }
.m { display: inline-block; min-width: 5em; font-weight: bold; }
.d { color: #a00; text-decoration: line-through; }
label { display: block; margin: .3em 0; } input[type=text] { width: 20em; }
textarea { width: 100%; min-height: 8em; } pre { background: #f6f6f6; padding: .5em;
  white-space: pre-wrap; word-break: break-all; max-height: 30em; overflow: auto; }
</style>
</head>
<body>
<h1 id="title">Podium API</h1>
<p><label>API key (sent as <code>Authorization: Bearer</code>, if given):
<input type="text" id="key" autocomplete="off"></label>
<a id="doc">OpenAPI document</a></p>
<div id="ops">Loading the description...</div>
<script>
"use strict";
const base = location.pathname.replace(/\\/+$/, "");
const docUrl = base + "/openapi.json";
const root = base.replace(/\\/v2\\/docs$/, "");
document.getElementById("doc").href = docUrl;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

const EXAMPLE = JSON.stringify({inputs: [{name: "x", shape: [2], datatype: "FP32", data: [1, 2]}]}, null, 2);

function form(path, method, op) {
  const box = el("div");
  const fields = {};
  for (const p of op.parameters || []) {
    if (p.in !== "path" && p.in !== "query") continue;
    const label = el("label", p.name + " (" + p.in + (p.required ? ", required" : "") + "): ");
    const input = el("input");
    input.type = "text";
    input.title = p.description || "";
    label.append(input);
    box.append(label);
    fields[p.name] = [p.in, input];
  }
  let body = null;
  if (op.requestBody) {
    const types = Object.keys(op.requestBody.content || {});
    body = el("textarea");
    const json = types.includes("application/json");
    if (json && op.requestBody.content["application/json"].schema &&
        JSON.stringify(op.requestBody.content["application/json"].schema).includes("InferenceRequest")) {
      body.value = EXAMPLE;
    }
    box.append(el("label", "Body (" + (json ? "application/json" : types.join(", ")) + "):"), body);
  }
  const send = el("button", "Send");
  const out = el("pre");
  send.type = "button";
  send.onclick = async () => {
    let url = path;
    const query = new URLSearchParams();
    for (const [name, [where, input]] of Object.entries(fields)) {
      if (where === "path") url = url.replace("{" + name + "}", encodeURIComponent(input.value));
      else if (input.value !== "") query.set(name, input.value);
    }
    url = root + url + (query.toString() ? "?" + query : "");
    const headers = {};
    const key = document.getElementById("key").value.trim();
    if (key) headers["Authorization"] = "Bearer " + key;
    const init = {method, headers};
    if (body && body.value !== "") {
      init.body = body.value;
      headers["Content-Type"] = "application/json";
    }
    out.textContent = method + " " + url + "\\n";
    try {
      const answer = await fetch(url, init);
      out.textContent += answer.status + " " + answer.statusText + "\\n";
      answer.headers.forEach((v, k) => { out.textContent += k + ": " + v + "\\n"; });
      out.textContent += "\\n";
      const reader = answer.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const {done, value} = await reader.read();
        if (done) break;
        out.textContent += decoder.decode(value, {stream: true});
      }
    } catch (err) {
      out.textContent += "failed: " + err;
    }
  };
  box.append(send, out);
  return box;
}

async function main() {
  const ops = document.getElementById("ops");
  let doc;
  try {
    doc = await (await fetch(docUrl)).json();
  } catch (err) {
    ops.textContent = "Could not read " + docUrl + ": " + err;
    return;
  }
  document.getElementById("title").textContent = doc.info.title + " " + doc.info.version;
  ops.textContent = "";
  const byTag = new Map();
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const tag = (op.tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push([path, method.toUpperCase(), op]);
    }
  }
  const tagText = new Map((doc.tags || []).map(t => [t.name, t.description]));
  for (const [tag, list] of byTag) {
    ops.append(el("h2", tagText.get(tag) || tag));
    for (const [path, method, op] of list) {
      const d = el("details");
      const s = el("summary");
      s.append(el("span", method, "m"), el("code", path, op.deprecated ? "d" : undefined),
               document.createTextNode(" " + (op.summary || "")));
      d.append(s);
      d.addEventListener("toggle", () => {
        if (d.open && d.childElementCount === 1) d.append(form(path, method, op));
      });
      ops.append(d);
    }
  }
}
main();
</script>
</body>
</html>
"""
