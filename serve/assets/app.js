// The chat page: a conversation kept in this page, sent whole to this server's
// /v1/chat/completions with `stream: true` on every turn, the answer streamed into the
// DOM. The request holds exactly what the page shows: the system prompt and the turns,
// `model`, `stream`, and each parameter field that is filled in (nothing else), so the
// same body sent by any client gives the same answer for the same seed.

import { sseData } from "./sse.js";

const $ = (id) => document.getElementById(id);

const state = {
  model: null, // the id from GET /v1/models
  key: null, // the API key, when the server asks for one: in memory only, never stored
  turns: [], // {role, content, li}: the conversation after the system prompt
  controller: null, // the AbortController of the request in flight
  retry: null, // what to run again once a key is given
};

// A refusal of the page's own (a field it cannot send), shown beside the field.
class FieldError extends Error {}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  if (state.key) h.Authorization = `Bearer ${state.key}`;
  return h;
}

// The server answered 401: ask for the key, then run `retry`.
function askKey(retry) {
  state.retry = retry;
  $("key-form").hidden = false;
  $("key").focus();
}

async function loadModel() {
  const r = await fetch("/v1/models", { headers: headers() });
  if (r.status === 401) return askKey(null); // loaded once the key is given
  if (!r.ok) return showError(`GET /v1/models: HTTP ${r.status}`);
  const list = await r.json();
  state.model = list.data[0].id;
  $("model").textContent = state.model;
}

// The filled-in parameter fields as request fields; empty ones are left out.
function params() {
  const out = {};
  for (const el of $("params").elements) {
    const raw = el.value;
    if (raw.trim() === "") continue;
    const kind = el.dataset.kind;
    if (kind === "lines") {
      out[el.name] = raw.split("\n").filter((s) => s !== "");
      continue;
    }
    const v = raw.trim();
    const n = Number(v);
    if (kind === "int" && !(/^-?\d+$/.test(v) && Number.isSafeInteger(n))) {
      throw new FieldError(`${el.name}: ${v} is not an integer (within ±2^53)`);
    }
    if (!Number.isFinite(n)) throw new FieldError(`${el.name}: ${v} is not a number`);
    out[el.name] = n;
  }
  return out;
}

// The JSON-schema box as `response_format`, or nothing when it is empty.
function responseFormat() {
  const text = $("schema").value.trim();
  $("schema-error").hidden = true;
  if (!text) return {};
  let schema;
  try {
    schema = JSON.parse(text);
  } catch (e) {
    $("schema-error").textContent = `The schema is not JSON: ${e.message}`;
    $("schema-error").hidden = false;
    throw new FieldError("the JSON schema box does not hold JSON");
  }
  return { response_format: { type: "json_schema", json_schema: { name: "page", schema, strict: true } } };
}

function addTurn(role, content) {
  const li = document.createElement("li");
  li.className = role;
  const who = document.createElement("span");
  who.className = "role";
  who.textContent = role;
  const body = document.createElement("div");
  body.className = "content";
  body.textContent = content; // text only: model output is never parsed as HTML
  const finish = document.createElement("small");
  finish.className = "finish";
  li.append(who, body, finish);
  $("messages").append(li);
  li.scrollIntoView({ block: "nearest" });
  const turn = { role, content, li };
  state.turns.push(turn);
  return turn;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("regenerate").disabled = busy || state.turns.length === 0;
  $("status").textContent = busy ? "generating…" : "";
}

// The request fields the settings ask for, or null (with the reason shown) when one of
// them cannot be sent.
function fields() {
  try {
    const f = { ...params(), ...responseFormat() };
    showError("");
    return f;
  } catch (e) {
    if (!(e instanceof FieldError)) throw e;
    showError(e.message);
    return null;
  }
}

// One turn: send the conversation, stream the answer into a new assistant message.
async function complete(extra) {
  const system = $("system").value;
  const messages = [
    ...(system.trim() ? [{ role: "system", content: system }] : []),
    ...state.turns.map(({ role, content }) => ({ role, content })),
  ];
  const body = { model: state.model ?? undefined, messages, stream: true, ...extra };
  const turn = addTurn("assistant", "");
  const out = turn.li.querySelector(".content");
  turn.li.classList.add("streaming");
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  let finish = null;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (r.status === 401) {
      finish = "unauthorized";
      return askKey(() => complete(extra));
    }
    if (!r.ok) {
      const err = await r.json().catch(() => null);
      throw new Error(`HTTP ${r.status}: ${err?.error?.message ?? r.statusText}`);
    }
    for await (const data of sseData(r.body)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.system_fingerprint) $("fingerprint").textContent = chunk.system_fingerprint;
      for (const c of chunk.choices ?? []) {
        if (c.delta?.content) {
          turn.content += c.delta.content;
          out.textContent = turn.content;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else {
      finish = "error";
      showError(e.message);
    }
  } finally {
    state.controller = null;
    turn.li.classList.remove("streaming");
    // An answer that never began (a refused request) leaves no turn behind; the user's
    // message stays, for Regenerate to send again.
    if (turn.content === "" && finish !== "stop" && finish !== "length") {
      turn.li.remove();
      state.turns = state.turns.filter((t) => t !== turn); // Clear may have emptied them
    } else {
      turn.li.dataset.finish = finish ?? "";
      turn.li.querySelector(".finish").textContent = finish ? `finish: ${finish}` : "";
    }
    setBusy(false);
  }
}

function send(event) {
  event.preventDefault();
  const text = $("input").value;
  if (state.controller || text.trim() === "") return;
  const f = fields();
  if (!f) return; // the message stays in the box
  addTurn("user", text);
  $("input").value = "";
  complete(f);
}

// The last answer again: drop it (if there is one) and send the same conversation.
function regenerate() {
  if (state.controller || state.turns.length === 0) return;
  const f = fields();
  if (!f) return;
  const last = state.turns[state.turns.length - 1];
  if (last.role === "assistant") {
    last.li.remove();
    state.turns.pop();
  }
  complete(f);
}

function clear() {
  if (state.controller) state.controller.abort();
  state.turns = [];
  $("messages").replaceChildren();
  showError("");
  setBusy(false);
}

$("compose").addEventListener("submit", send);
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("compose").requestSubmit();
  }
});
$("stop").addEventListener("click", () => state.controller?.abort());
$("regenerate").addEventListener("click", regenerate);
$("clear").addEventListener("click", clear);
$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.key = $("key").value.trim();
  $("key-form").hidden = true;
  const retry = state.retry;
  state.retry = null;
  if (!state.model) loadModel();
  retry?.();
});
setBusy(false);
loadModel();
