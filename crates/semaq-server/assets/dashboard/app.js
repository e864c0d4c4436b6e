// The SemaQ dashboard: polls the monitoring port's JSON endpoints and draws them.
// No framework and no CDN; every text from the broker goes in through textContent.
"use strict";

const POLL_MS = 2000;
const SCHEMA_POLL_MS = 10000;
const SCHEMAS_SHOWN_MAX = 50;
const HEATMAP_ROWS_MAX = 12;

const state = { previous: null, lastSchemas: 0 };

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = cell instanceof Node ? document.createElement("td") : el("td", cell);
    if (cell instanceof Node) td.appendChild(cell);
    if (typeof cell === "number") td.className = "num";
    tr.appendChild(td);
  }
  return tr;
}

function fill(tableId, rows, emptyText) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren(...rows);
  if (rows.length === 0) {
    const td = el("td", emptyText, "muted");
    td.colSpan = document.querySelectorAll(`#${tableId} thead th`).length;
    const tr = document.createElement("tr");
    tr.className = "empty";
    tr.appendChild(td);
    body.appendChild(tr);
  }
}

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

function number(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n || 0);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

function micros(us) {
  const value = Number(us || 0);
  return value >= 1000 ? `${(value / 1000).toFixed(2)} ms` : `${value} µs`;
}

function rate(now, before, seconds) {
  if (before === undefined || seconds <= 0) return 0;
  return Math.max(0, (now - before) / seconds);
}

function drawOverview(varz, streams, agents, tokens, seconds) {
  const before = state.previous;
  const messages = streams.streams.reduce((sum, s) => sum + (s.state?.messages || 0), 0);
  const lastBucket = (series) => series.reduce((sum, s) => sum + (s.tokens_in.at(-1) || 0) + (s.tokens_out.at(-1) || 0), 0);
  const cards = [
    ["connections", number(varz.connections)],
    ["subscriptions", number(varz.subscriptions)],
    ["msgs in / s", number(Math.round(rate(varz.in_msgs, before?.in_msgs, seconds)))],
    ["msgs out / s", number(Math.round(rate(varz.out_msgs, before?.out_msgs, seconds)))],
    ["streams", number(streams.streams.length)],
    ["stored messages", number(messages)],
    ["agents", number(agents.agents.length)],
    ["tokens / s (last bucket)", number(Math.round(lastBucket(tokens.series) / tokens.bucket_seconds))],
    ["uptime", varz.uptime],
  ];
  document.getElementById("overview").replaceChildren(...cards.map(([label, value]) => {
    const card = el("div", null, "card");
    card.append(el("div", value, "value"), el("div", label, "label"));
    return card;
  }));
  document.getElementById("server").textContent = `${varz.server_name} · semaq ${varz.semaq_version} · nats ${varz.version}`;
}

function drawStreams(streams, seconds) {
  const before = state.previous?.lastSeq || {};
  const rows = streams.streams.map((s) => {
    const schema = s.config?.metadata?.["semaq.schema"] || "—";
    const perSecond = rate(s.state.last_seq, before[s.config.name], seconds);
    return row([s.config.name, `L${s.level}`, schema, (s.config.subjects || []).join(", "),
      s.state.messages, bytes(s.state.bytes), Number(perSecond.toFixed(1)), s.consumers.length]);
  });
  fill("streams", rows, streams.jetstream ? "No streams yet." : "JetStream is off.");
  const consumers = streams.streams.flatMap((s) => s.consumers.map((c) => row([s.config.name, c.name,
    c.num_pending, c.num_ack_pending, c.num_redelivered, c.num_waiting, c.delivered?.stream_seq || 0])));
  fill("consumers", consumers, "No consumers yet.");
}

function drawLatency(latency) {
  document.getElementById("objective").textContent = `objective ${micros(latency.objective_us)}, publish → delivery`;
  const byKind = [...latency.streams.map((s) => ["stream", s]), ...latency.subjects.map((s) => ["subject prefix", s])];
  const rows = byKind.map(([kind, s]) => {
    const within = el("span", `${(s.within_objective * 100).toFixed(1)}%`, s.within_objective >= 0.99 ? "ok" : "bad");
    const p99 = el("span", micros(s.p99_us), s.p99_us <= latency.objective_us ? "ok" : "bad");
    const key = el("span", s.key, kind === "subject prefix" ? "muted" : "");
    return row([kind, key, s.count, micros(s.p50_us), p99, micros(s.recent_p99_us), within]);
  });
  fill("latency", rows, "No consumer deliveries yet.");
}

function drawAgents(agents) {
  const box = document.getElementById("agents");
  if (agents.intents.length === 0) {
    box.replaceChildren(el("p", "No agents have announced an intent.", "muted"));
    return;
  }
  box.replaceChildren(...agents.intents.map((intent) => {
    const section = el("div", null, "intent");
    section.appendChild(el("div", `intent.${intent.name} · routed ${number(intent.routed)} · waiting ${intent.waiting}`));
    for (const agent of intent.agents) {
      const line = el("div", null, "weight");
      const bar = el("div", null, "bar");
      bar.style.width = `${Math.round(agent.weight * 120)}px`;
      line.append(el("span", agent.agent_id, "name"), bar,
        el("span", `w ${agent.weight.toFixed(2)} · in flight ${agent.in_flight} · ${agent.latency_ms.toFixed(1)} ms · errors ${agent.errors}`, "muted"));
      section.appendChild(line);
    }
    return section;
  }));
}

// Dark blue to yellow, by the cell's share of the largest rate on a log scale.
function colour(share) {
  const stops = [[22, 30, 60], [40, 90, 160], [40, 170, 140], [190, 210, 60], [250, 230, 90]];
  const position = Math.min(0.999, Math.max(0, share)) * (stops.length - 1);
  const low = Math.floor(position);
  const t = position - low;
  const mix = stops[low].map((c, i) => Math.round(c + (stops[low + 1][i] - c) * t));
  return `rgb(${mix[0]}, ${mix[1]}, ${mix[2]})`;
}

function drawHeatmap(tokens) {
  const canvas = document.getElementById("heatmap");
  const context = canvas.getContext("2d");
  const series = tokens.series.slice(0, HEATMAP_ROWS_MAX);
  const label = 150;
  const axis = 20;
  context.fillStyle = "#0f1419";
  context.fillRect(0, 0, canvas.width, canvas.height);
  document.getElementById("token-empty").hidden = series.length > 0;
  let cells = 0;
  let peak = 0;
  for (const s of series) {
    for (let i = 0; i < tokens.buckets; i += 1) peak = Math.max(peak, (s.tokens_in[i] + s.tokens_out[i]) / tokens.bucket_seconds);
  }
  const height = series.length ? (canvas.height - axis) / series.length : 0;
  const width = (canvas.width - label) / tokens.buckets;
  context.font = "12px system-ui, sans-serif";
  series.forEach((s, r) => {
    context.fillStyle = "#d8dee6";
    context.fillText(s.key.slice(0, 22), 4, r * height + height / 2 + 4);
    for (let i = 0; i < tokens.buckets; i += 1) {
      const perSecond = (s.tokens_in[i] + s.tokens_out[i]) / tokens.bucket_seconds;
      if (perSecond <= 0) continue;
      cells += 1;
      context.fillStyle = colour(Math.log1p(perSecond) / Math.log1p(peak));
      context.fillRect(label + i * width, r * height + 1, Math.max(1, width - 0.5), height - 2);
    }
  });
  context.fillStyle = "#8493a5";
  const start = new Date(tokens.start * 1000);
  const end = new Date((tokens.start + tokens.buckets * tokens.bucket_seconds) * 1000);
  context.fillText(start.toLocaleTimeString(), label, canvas.height - 5);
  const endText = end.toLocaleTimeString();
  context.fillText(endText, canvas.width - context.measureText(endText).width - 4, canvas.height - 5);
  canvas.dataset.cells = String(cells);
  canvas.dataset.rows = String(series.length);
  document.getElementById("token-scale").textContent = peak > 0
    ? `peak ${number(Math.round(peak))} tokens/s per ${tokens.bucket_seconds} s bucket${tokens.invalid ? ` · ${tokens.invalid} bad counts` : ""}`
    : "";
}

async function drawSchemas() {
  const subjects = await getJson("/subjects");
  const shown = subjects.slice(0, SCHEMAS_SHOWN_MAX);
  const versions = await Promise.all(shown.map((s) => getJson(`/subjects/${encodeURIComponent(s)}/versions`).catch(() => [])));
  fill("schemas", shown.map((s, i) => row([s, versions[i].length, versions[i].length ? `v${versions[i].at(-1)}` : "—"])),
    "No schemas registered.");
}

async function refresh() {
  const by = document.getElementById("token-by").value;
  const window = document.getElementById("token-window").value;
  try {
    const [varz, streams, agents, tokens, latency] = await Promise.all([
      getJson("/varz"), getJson("/api/streams"), getJson("/semaq/agents"),
      getJson(`/api/tokens?by=${by}&window=${window}`), getJson("/api/latency"),
    ]);
    const now = performance.now();
    const seconds = state.previous ? (now - state.previous.at) / 1000 : 0;
    drawOverview(varz, streams, agents, tokens, seconds);
    drawStreams(streams, seconds);
    drawLatency(latency);
    drawAgents(agents);
    drawHeatmap(tokens);
    const lastSeq = Object.fromEntries(streams.streams.map((s) => [s.config.name, s.state.last_seq]));
    state.previous = { at: now, in_msgs: varz.in_msgs, out_msgs: varz.out_msgs, lastSeq };
    if (now - state.lastSchemas > SCHEMA_POLL_MS) {
      state.lastSchemas = now;
      await drawSchemas();
    }
    document.getElementById("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.ready = "true";
  } catch (error) {
    document.getElementById("status").textContent = `cannot reach the broker: ${error.message}`;
  }
}

document.getElementById("token-by").addEventListener("change", refresh);
document.getElementById("token-window").addEventListener("change", refresh);
refresh();
setInterval(refresh, POLL_MS);
