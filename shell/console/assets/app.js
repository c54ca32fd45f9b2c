// Tern console: one script, one view per URL fragment (#/topics, #/group/NAME, ...).
// Everything it shows comes from the console's JSON API (/api/...); every failure is
// shown in the red banner with the server's words, never a blank page.
"use strict";

const main = () => document.getElementById("main");
let timer = null; // the current view's refresh, cleared on navigation

// h("td", {class: "num"}, "12") -> element; children may be strings, nodes or arrays.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function showError(text) {
  const e = document.getElementById("error");
  if (!text) { e.hidden = true; e.textContent = ""; return; }
  e.textContent = text;
  e.hidden = false;
}

function notice(text) { return h("div", { class: "notice", role: "status" }, text); }

async function api(method, path, body) {
  const opts = { method, headers: { "X-Tern-Console": "1" } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch("/api/" + path, opts);
  } catch (e) {
    throw new Error("The console cannot be reached: " + e.message);
  }
  let data = null;
  try { data = await resp.json(); } catch (_) { /* not JSON */ }
  if (resp.status === 401 && path !== "login") { location.hash = "#/login"; throw new Error("Log in first."); }
  if (!resp.ok) throw new Error((data && data.error) || ("HTTP " + resp.status));
  return data;
}

const q = (params) => new URLSearchParams(params).toString();
const time = (ms) => (ms > 0 ? new Date(ms).toLocaleString() : "-");
const fromInput = (v) => (v ? new Date(v).getTime() : "");
const toInput = (ms) => {
  const d = new Date(ms - new Date().getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 16);
};
const table = (heads, rows, attrs) =>
  h("table", attrs || {}, h("thead", {}, h("tr", {}, heads.map((c) => h("th", {}, c)))), h("tbody", {}, rows));

// ---- views ----

async function overview() {
  const [cluster, tps] = await Promise.all([api("GET", "cluster"), api("GET", "tps")]);
  const rows = [];
  for (const c of cluster.clusters)
    for (const b of c.brokers)
      rows.push(h("tr", {}, h("td", {}, c.name), h("td", {}, b.name), h("td", { class: "num" }, b.id), h("td", {}, b.role),
        h("td", {}, b.addr), h("td", {}, b.version || "-"),
        h("td", { class: "num" }, b.diskRatio ? (Number(b.diskRatio) * 100).toFixed(1) + " %" : "-"),
        h("td", { class: "num" }, b.putToday || "0"), h("td", { class: "num" }, b.getToday || "0"),
        h("td", {}, b.error || "")));
  const last = tps[tps.length - 1];
  return [
    h("h1", {}, "Overview"),
    h("p", { class: "muted" }, "Name servers: " + cluster.namesrv.join(", ")),
    h("div", {},
      h("span", { class: "stat" }, "Produce TPS", h("b", { id: "put-tps" }, last ? last.putTps.toFixed(1) : "0")),
      h("span", { class: "stat" }, "Consume TPS", h("b", { id: "get-tps" }, last ? last.getTps.toFixed(1) : "0"))),
    h("h2", {}, "Brokers"),
    table(["Cluster", "Broker", "Id", "Role", "Address", "Version", "Disk used", "Put today", "Got today", ""], rows, { id: "brokers" }),
    h("h2", {}, "Messages per second, last 30 minutes"),
    chart(tps),
  ];
}

function chart(samples) {
  const W = 900, H = 220, P = 40;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("id", "tps-chart");
  svg.setAttribute("data-samples", samples.length);
  const max = Math.max(1, ...samples.map((s) => Math.max(s.putTps, s.getTps)));
  svg.setAttribute("data-max", max.toFixed(1));
  svg.setAttribute("data-put-max", Math.max(0, ...samples.map((s) => s.putTps)).toFixed(1));
  svg.setAttribute("data-get-max", Math.max(0, ...samples.map((s) => s.getTps)).toFixed(1));
  // The last 30 minutes, or since the first sample when the console is younger.
  const now = Date.now();
  const span = Math.min(30 * 60 * 1000, Math.max(60 * 1000, samples.length ? now - samples[0].time : 0));
  const x = (t) => P + ((t - (now - span)) / span) * (W - 2 * P);
  const y = (v) => H - P + 10 - (v / max) * (H - 2 * P);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el);
  };
  add("line", { x1: P, y1: y(0), x2: W - P, y2: y(0), stroke: "#999" });
  add("line", { x1: P, y1: y(max), x2: P, y2: y(0), stroke: "#999" });
  add("text", { x: 4, y: y(max) + 4, "font-size": 11 }, max.toFixed(0));
  add("text", { x: 4, y: y(0) + 4, "font-size": 11 }, "0");
  add("text", { x: P, y: H - 6, "font-size": 11 }, span >= 120000 ? `-${Math.round(span / 60000)} min` : `-${Math.round(span / 1000)} s`);
  add("text", { x: W - P - 20, y: H - 6, "font-size": 11 }, "now");
  for (const [key, cls] of [["putTps", "put"], ["getTps", "get"]]) {
    const pts = samples.map((s) => `${x(s.time).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ");
    add("polyline", { points: pts, fill: "none", "stroke-width": 2, class: cls });
  }
  return h("div", {}, svg, h("div", { class: "legend" }, h("span", { class: "put" }, "■ produced"), h("span", { class: "get" }, "■ consumed")));
}

async function topics() {
  const [list, cluster] = await Promise.all([api("GET", "topics"), api("GET", "cluster")]);
  const filter = h("input", { id: "topic-filter", placeholder: "filter topics", oninput: () => draw() });
  const showSystem = h("input", { type: "checkbox", id: "show-system", onchange: () => draw() });
  const body = h("tbody", {});
  const detail = h("div", { id: "topic-detail" });
  function draw() {
    const f = filter.value.trim().toLowerCase();
    body.replaceChildren(...list
      .filter((t) => (showSystem.checked || t.kind === "NORMAL") && t.topic.toLowerCase().includes(f))
      .map((t) => h("tr", { "data-topic": t.topic }, h("td", {}, t.topic), h("td", {}, t.kind),
        h("td", {},
          h("button", { class: "plain", onclick: () => topicDetail(t.topic, detail) }, "Status"), " ",
          h("button", { class: "plain", onclick: () => editTopic(t.topic) }, "Edit"), " ",
          h("button", { class: "danger", onclick: () => deleteTopic(t.topic) }, "Delete")))));
  }
  draw();
  const form = h("form", { id: "topic-form", onsubmit: async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const r = await run(() => api("POST", "topics", {
      topic: f.get("topic"), readQueueNums: Number(f.get("read")), writeQueueNums: Number(f.get("write")), perm: Number(f.get("perm")),
      cluster: f.get("cluster"),
    }));
    if (r) { await render(); main().prepend(notice(`Topic ${r.topic} saved on ${r.brokers.join(", ")}`)); }
  } },
  h("label", {}, "Cluster", h("select", { name: "cluster", id: "topic-cluster" }, cluster.clusters.map((c) => h("option", { value: c.name }, c.name)))),
  h("label", {}, "Topic", h("input", { name: "topic", id: "new-topic", required: true })),
  h("label", {}, "Read queues", h("input", { name: "read", id: "read-queues", type: "number", min: 1, value: 8 })),
  h("label", {}, "Write queues", h("input", { name: "write", id: "write-queues", type: "number", min: 1, value: 8 })),
  h("label", {}, "Permission", h("select", { name: "perm", id: "perm" },
    h("option", { value: 6 }, "read and write (6)"), h("option", { value: 4 }, "read only (4)"), h("option", { value: 2 }, "write only (2)"))),
  h("button", { id: "create-topic" }, "Create / update"));
  return [h("h1", {}, "Topics"), form,
    h("div", { class: "panel" }, filter, h("label", {}, h("span", {}, "system, retry and DLQ topics too"), showSystem)),
    h("table", { id: "topics" }, h("thead", {}, h("tr", {}, h("th", {}, "Topic"), h("th", {}, "Kind"), h("th", {}, ""))), body),
    detail];
}

async function topicDetail(topic, into) {
  const d = await run(() => api("GET", "topic?" + q({ topic })));
  if (!d) return;
  const brokers = d.route.brokerDatas.map((b) => h("tr", {}, h("td", {}, b.brokerName), h("td", {}, JSON.stringify(b.brokerAddrs))));
  const qd = d.route.queueDatas.map((x) => h("tr", {}, h("td", {}, x.brokerName), h("td", { class: "num" }, x.readQueueNums), h("td", { class: "num" }, x.writeQueueNums), h("td", { class: "num" }, x.perm)));
  into.replaceChildren(h("h2", {}, "Topic " + topic),
    h("p", {}, "Consumer groups: " + (d.consumerGroups.join(", ") || "none")),
    table(["Broker", "Addresses"], brokers),
    h("h2", {}, "Queues (route)"), table(["Broker", "Read queues", "Write queues", "Perm"], qd),
    h("h2", {}, "Offsets"),
    table(["Broker", "Queue", "Min offset", "Max offset", "Last update"], d.queues.map((x) => h("tr", {},
      h("td", {}, x.brokerName), h("td", { class: "num" }, x.queueId), h("td", { class: "num" }, x.minOffset),
      h("td", { class: "num" }, x.maxOffset), h("td", {}, time(x.lastUpdateTimestamp)))), { id: "topic-offsets" }));
}

// Fills the form with a topic's queues and permission as its route has them, so an
// update changes only what the person changes.
async function editTopic(topic) {
  const d = await run(() => api("GET", "topic?" + q({ topic })));
  if (!d || !d.route.queueDatas.length) return;
  const qd = d.route.queueDatas[0];
  document.getElementById("new-topic").value = topic;
  document.getElementById("read-queues").value = qd.readQueueNums;
  document.getElementById("write-queues").value = qd.writeQueueNums;
  document.getElementById("perm").value = String(qd.perm & 6);
  const c = d.route.brokerDatas[0] && d.route.brokerDatas[0].cluster;
  if (c) document.getElementById("topic-cluster").value = c;
  document.getElementById("new-topic").focus();
}

async function deleteTopic(topic) {
  if (!confirm(`Delete topic ${topic} from every broker and name server? Its messages can no longer be consumed.`)) return;
  const r = await run(() => api("POST", "topic/delete", { topic }));
  if (r) { await render(); main().prepend(notice(`Topic ${topic} deleted`)); }
}

async function groups() {
  const d = await api("GET", "groups");
  const filter = h("input", { id: "group-filter", placeholder: "filter groups", oninput: () => draw() });
  const body = h("tbody", {});
  function draw() {
    const f = filter.value.trim().toLowerCase();
    body.replaceChildren(...d.groups.filter((g) => g.group.toLowerCase().includes(f)).map((g) =>
      h("tr", {}, h("td", {}, h("a", { href: "#/group/" + encodeURIComponent(g.group) }, g.group)), h("td", {}, g.brokers.join(", ")))));
  }
  draw();
  return [h("h1", {}, "Consumer groups"), d.errors.length ? h("p", { class: "muted" }, "Not answered: " + d.errors.join("; ")) : null,
    h("div", { class: "panel" }, filter),
    h("table", { id: "groups" }, h("thead", {}, h("tr", {}, h("th", {}, "Group"), h("th", {}, "Brokers"))), body)];
}

async function group(name) {
  const d = await api("GET", "group?" + q({ group: name }));
  const p = d.progress;
  const rows = p.queues.map((x) => h("tr", {}, h("td", {}, x.queue.topic), h("td", {}, x.queue.brokerName), h("td", { class: "num" }, x.queue.queueId),
    h("td", { class: "num" }, x.brokerOffset), h("td", { class: "num" }, x.consumerOffset), h("td", { class: "num" }, x.diff), h("td", {}, time(x.lastTimestamp))));
  const conns = d.connection ? d.connection.connectionSet.map((c) => h("tr", {}, h("td", {}, c.clientId), h("td", {}, c.clientAddr), h("td", {}, c.language), h("td", { class: "num" }, c.version))) : [];
  const subs = d.connection ? Object.values(d.connection.subscriptionTable).map((s) => h("tr", {}, h("td", {}, s.topic), h("td", {}, s.expressionType || "TAG"), h("td", {}, s.subString))) : [];
  const topics = [...new Set(p.queues.map((x) => x.queue.topic))].filter((t) => !t.startsWith("%RETRY%"));
  const reset = h("form", { id: "reset-form", onsubmit: async (e) => {
    e.preventDefault();
    const ts = fromInput(document.getElementById("reset-time").value);
    const topic = document.getElementById("reset-topic").value;
    const r = await run(() => api("POST", "group/reset", { group: name, timestamp: ts, topic }));
    if (r) { await render(); main().prepend(notice(`Offsets of ${name} reset to ${time(ts)}: ` + JSON.stringify(r.queuesByTopic))); }
  } }, h("label", {}, "Topic", h("select", { id: "reset-topic" }, h("option", { value: "" }, "every topic"), topics.map((t) => h("option", { value: t }, t)))),
  h("label", {}, "Reset offsets to", h("input", { type: "datetime-local", id: "reset-time", step: 1, value: toInput(Date.now() - 3600000) })),
  h("button", { id: "reset-offset" }, "Reset"));
  const del = h("button", { class: "danger", id: "delete-group", onclick: async () => {
    if (!confirm(`Delete consumer group ${name} and its offsets on every broker?`)) return;
    const r = await run(() => api("POST", "group/delete", { group: name }));
    if (r) { location.hash = "#/groups"; }
  } }, "Delete group");
  return [h("h1", {}, "Consumer group " + name),
    h("div", {}, h("span", { class: "stat" }, "Total lag", h("b", { id: "group-lag" }, p.diffTotal)),
      h("span", { class: "stat" }, "Consume TPS", h("b", {}, p.consumeTps.toFixed(1))),
      h("span", { class: "stat" }, "Online clients", h("b", { id: "group-clients" }, conns.length))),
    reset,
    h("div", { class: "panel" }, h("a", { href: "#/messages?" + q({ topic: "%DLQ%" + name }) }, "Dead-letter messages of this group"), del),
    h("h2", {}, "Progress per queue"),
    table(["Topic", "Broker", "Queue", "Broker offset", "Consumer offset", "Lag", "Last consumed"], rows, { id: "group-queues" }),
    h("h2", {}, "Connections"), d.offline ? h("p", { class: "muted", id: "group-offline" }, d.offline) : table(["Client id", "Address", "Language", "Version"], conns, { id: "group-connections" }),
    h("h2", {}, "Subscriptions"), table(["Topic", "Type", "Expression"], subs)];
}

async function producers() {
  const out = h("div", { id: "producer-result" });
  const form = h("form", { id: "producer-form", onsubmit: async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const conns = await run(() => api("GET", "producers?" + q({ group: f.get("group"), topic: f.get("topic") })));
    if (conns) out.replaceChildren(conns.length ? table(["Client id", "Address", "Language", "Version"], conns.map((c) =>
      h("tr", {}, h("td", {}, c.clientId), h("td", {}, c.clientAddr), h("td", {}, c.language), h("td", { class: "num" }, c.version))))
      : h("p", { class: "muted" }, "No producer of this group is connected."));
  } }, h("label", {}, "Producer group", h("input", { name: "group", required: true })),
  h("label", {}, "Topic", h("input", { name: "topic", required: true })), h("button", {}, "Show connections"));
  return [h("h1", {}, "Producers"), form, out];
}

async function messages(params) {
  const out = h("div", { id: "message-results" });
  const show = (list) => out.replaceChildren(list.length === 0 ? h("p", { class: "muted" }, "No message found.") :
    table(["Message id", "Tags", "Keys", "Queue", "Offset", "Stored", ""], list.map((m) => h("tr", {},
      h("td", {}, m.msgId), h("td", {}, m.tags || ""), h("td", {}, m.keys || ""), h("td", { class: "num" }, m.queueId), h("td", { class: "num" }, m.queueOffset),
      h("td", {}, time(m.storeTimestamp)),
      h("td", {}, h("a", { href: "#/message/" + encodeURIComponent(m.offsetMsgId) + "?" + q({ topic: m.topic }) }, "Detail"))))));
  const search = async (query) => { const r = await run(() => api("GET", "messages?" + q(query))); if (r) show(r); };
  const byKey = h("form", { id: "by-key", onsubmit: (e) => { e.preventDefault(); const f = new FormData(byKey); search({ topic: f.get("topic"), key: f.get("key") }); } },
    h("label", {}, "Topic", h("input", { name: "topic", id: "key-topic", required: true })),
    h("label", {}, "Key", h("input", { name: "key", id: "key", required: true })), h("button", { id: "search-key" }, "Find by key"));
  const byId = h("form", { id: "by-id", onsubmit: (e) => { e.preventDefault(); const f = new FormData(byId); search({ id: f.get("id"), topic: f.get("topic") }); } },
    h("label", {}, "Message id", h("input", { name: "id", id: "msg-id", required: true, size: 34 })),
    h("label", {}, "Topic (for a client msgId)", h("input", { name: "topic", id: "id-topic" })), h("button", { id: "search-id" }, "Find by id"));
  const byTime = h("form", { id: "by-time", onsubmit: (e) => { e.preventDefault(); const f = new FormData(byTime);
    search({ topic: f.get("topic"), begin: fromInput(f.get("begin")), end: fromInput(f.get("end")) }); } },
  h("label", {}, "Topic", h("input", { name: "topic", id: "time-topic", required: true, value: params.get("topic") || "" })),
  h("label", {}, "From", h("input", { name: "begin", type: "datetime-local", step: 1, value: toInput(Date.now() - 3600000) })),
  h("label", {}, "To", h("input", { name: "end", type: "datetime-local", step: 1, value: toInput(Date.now() + 60000) })),
  h("button", { id: "search-time" }, "Find by time"));
  if (params.get("topic")) setTimeout(() => byTime.requestSubmit(), 0);
  return [h("h1", {}, "Messages"), byKey, byId, byTime, out];
}

function hex(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16));
    lines.push(i.toString(16).padStart(8, "0") + "  " + row.map((x) => x.toString(16).padStart(2, "0")).join(" ").padEnd(48) + "  " +
      row.map((x) => (x >= 32 && x < 127 ? String.fromCharCode(x) : ".")).join(""));
  }
  return lines.join("\n");
}

async function message(id, params) {
  const m = await api("GET", "message?" + q({ id, topic: params.get("topic") || "" }));
  const body = h("pre", { id: "message-body" });
  const views = {
    text: () => m.bodyText ?? "(not UTF-8 text: see hex)",
    hex: () => hex(m.bodyBase64),
    json: () => { try { return JSON.stringify(JSON.parse(m.bodyText), null, 2); } catch (e) { return "(not JSON: " + e.message + ")"; } },
  };
  const tabs = h("div", { class: "tabs", id: "body-view" });
  const pick = (name) => { body.textContent = views[name](); for (const b of tabs.children) b.classList.toggle("on", b.dataset.view === name); };
  for (const name of ["text", "hex", "json"]) tabs.append(h("button", { class: "plain", "data-view": name, onclick: () => pick(name) }, name.toUpperCase()));
  pick("text");
  const props = Object.entries(m.properties).map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {}, v)));
  const track = m.track.map((t) => h("tr", { "data-group": t.group }, h("td", {}, t.group), h("td", {}, t.state), h("td", { class: "num" }, t.consumerOffset ?? "-"),
    h("td", {}, t.clients.map((c) => h("button", { class: "plain", onclick: async () => {
      const r = await run(() => api("POST", "message/resend", { group: t.group, clientId: c, offsetMsgId: m.offsetMsgId, topic: m.topic }));
      if (r) main().prepend(notice(`Sent to ${c}: ${r.consumeResult || ""} ${r.remark || ""}`));
    } }, "Re-send to " + c)))));
  const facts = [["Topic", m.topic], ["Message id", m.msgId], ["Offset msgId", m.offsetMsgId], ["Tags", m.tags || ""], ["Keys", m.keys || ""],
    ["Queue", m.queueId], ["Queue offset", m.queueOffset], ["Born", time(m.bornTimestamp) + " at " + m.bornHost],
    ["Stored", time(m.storeTimestamp) + " at " + m.storeHost], ["Reconsume times", m.reconsumeTimes], ["Body bytes", m.bodySize]];
  return [h("h1", {}, "Message " + m.msgId),
    table(["", ""], facts.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))), { id: "message-facts" }),
    h("h2", {}, "Body"), tabs, body,
    h("h2", {}, "Properties"), table(["Name", "Value"], props),
    h("h2", {}, "Consumer groups"), table(["Group", "State", "Group offset", "Re-send"], track, { id: "message-track" })];
}

async function acl() {
  const d = await api("GET", "acl");
  const rows = [];
  for (const b of d.brokers) {
    const accounts = (b.config && (b.config.plainAccessConfigs || b.config.accounts)) || [];
    for (const a of accounts)
      rows.push(h("tr", { "data-account": a.accessKey }, h("td", {}, b.broker), h("td", {}, a.accessKey), h("td", {}, a.admin ? "yes" : "no"),
        h("td", {}, a.defaultTopicPerm || ""), h("td", {}, a.defaultGroupPerm || ""), h("td", {}, (a.topicPerms || []).join(", ")),
        h("td", {}, (a.groupPerms || []).join(", ")), h("td", {}, a.whiteRemoteAddress || ""),
        h("td", {}, d.editable ? h("button", { class: "danger", onclick: async () => {
          if (!confirm(`Delete ACL account ${a.accessKey} on every broker?`)) return;
          const r = await run(() => api("POST", "acl/delete", { accessKey: a.accessKey }));
          if (r) { await render(); main().prepend(notice(`Account ${a.accessKey} deleted`)); }
        } }, "Delete") : "")));
  }
  const perm = (name, id) => h("select", { name, id }, ["", "DENY", "PUB", "SUB", "PUB|SUB"].map((p) => h("option", { value: p }, p || "(unchanged)")));
  const form = d.editable ? h("form", { id: "acl-form", onsubmit: async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const r = await run(() => api("POST", "acl/account", {
      accessKey: f.get("accessKey"), secretKey: f.get("secretKey"), admin: f.get("admin") === "on",
      defaultTopicPerm: f.get("defaultTopicPerm"), defaultGroupPerm: f.get("defaultGroupPerm"),
      topicPerms: f.get("topicPerms"), groupPerms: f.get("groupPerms"), whiteRemoteAddress: f.get("whiteRemoteAddress"),
    }));
    if (r) { await render(); main().prepend(notice(`Account ${r.accessKey} saved on ${r.brokers.join(", ")}`)); }
  } },
  h("label", {}, "Access key", h("input", { name: "accessKey", id: "acl-access-key", required: true, minlength: 6 })),
  h("label", {}, "Secret key", h("input", { name: "secretKey", id: "acl-secret-key", type: "password", minlength: 6, autocomplete: "new-password" })),
  h("label", {}, "Admin", h("input", { name: "admin", type: "checkbox" })),
  h("label", {}, "Default topic perm", perm("defaultTopicPerm", "acl-topic-perm")),
  h("label", {}, "Default group perm", perm("defaultGroupPerm", "acl-group-perm")),
  h("label", {}, "Topic perms (topic=PERM, ...)", h("input", { name: "topicPerms" })),
  h("label", {}, "Group perms (group=PERM, ...)", h("input", { name: "groupPerms" })),
  h("label", {}, "White address", h("input", { name: "whiteRemoteAddress" })),
  h("button", { id: "acl-save" }, "Create / update account")) : null;
  return [h("h1", {}, "ACL accounts"),
    h("p", { class: "muted" }, d.editable ? "Changes go to every broker of every cluster. Secret keys are never shown."
      : "Read-only: the console has no admin credentials (consoleAccessKey, consoleSecretKey). Secret keys are never shown."),
    form,
    table(["Broker", "Access key", "Admin", "Default topic perm", "Default group perm", "Topic perms", "Group perms", "White address", ""], rows, { id: "acl" })];
}

async function login() {
  const form = h("form", { id: "login", onsubmit: async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const r = await run(() => api("POST", "login", { user: f.get("user"), password: f.get("password") }));
    if (r) location.hash = "#/overview";
  } }, h("label", {}, "User", h("input", { name: "user", autocomplete: "username" })),
  h("label", {}, "Password", h("input", { name: "password", type: "password", autocomplete: "current-password" })),
  h("button", {}, "Log in"));
  return [h("h1", {}, "Log in"), form];
}

// ---- routing ----

// Runs an action, showing its error in the banner; its result, or null on failure.
async function run(action) {
  try { const r = await action(); showError(null); return r; } catch (e) { showError(e.message); return null; }
}

function parseHash() {
  const [path, query] = (location.hash.replace(/^#/, "") || "/overview").split("?");
  const decode = (p) => { try { return decodeURIComponent(p); } catch (_) { return p; } };
  const parts = path.split("/").filter(Boolean).map(decode);
  return { page: parts[0] || "overview", arg: parts[1], params: new URLSearchParams(query || "") };
}

const views = {
  overview: { view: () => overview(), refresh: 5000 },
  topics: { view: () => topics() },
  groups: { view: () => groups() },
  group: { view: (r) => group(r.arg), refresh: 3000, nav: "groups" },
  producers: { view: () => producers() },
  messages: { view: (r) => messages(r.params) },
  message: { view: (r) => message(r.arg, r.params), nav: "messages" },
  acl: { view: () => acl() },
  login: { view: () => login() },
};

async function render(quiet) {
  const r = parseHash();
  const v = views[r.page] || views.overview;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === (v.nav || r.page));
  try {
    const nodes = await v.view(r);
    // A refresh must not throw away what a person is typing.
    if (quiet && main().contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    main().replaceChildren(...[nodes].flat().filter(Boolean));
    main().setAttribute("data-view", r.page);
    showError(null);
  } catch (e) {
    showError(e.message);
    if (!quiet) main().replaceChildren(h("p", { class: "muted" }, "This page could not be loaded; the reason is above."));
  }
}

function navigate() {
  clearInterval(timer);
  // The last page's error is not this page's: gone until this page fails too.
  showError(null);
  render(false);
  const v = views[parseHash().page];
  if (v && v.refresh) timer = setInterval(() => render(true), v.refresh);
}

async function start() {
  try {
    const s = await api("GET", "session");
    if (s.loginRequired) {
      document.getElementById("who").replaceChildren(h("button", { class: "plain", onclick: async () => { await api("POST", "logout", {}); location.hash = "#/login"; } }, "Log out"));
      if (!s.loggedIn) location.hash = "#/login";
    }
  } catch (e) { showError(e.message); }
  window.addEventListener("hashchange", navigate);
  navigate();
}

start();
