// The raftbus dashboard: polls /v1/dashboard, fills the tables and plots rates and lag over time with uPlot.
// Rates come from the difference of two snapshots; the history lives in this page only.
"use strict";

const params = new URLSearchParams(location.search);
const REFRESH_MS = Math.max(250, Number(params.get("refresh_ms")) || 2000);
const HISTORY_POINTS_MAX = 300;
const COLORS = ["#2f6fde", "#e0692b", "#1f8a4c", "#b3261e", "#8a4fd0", "#0f8c99", "#c27c0e", "#5b6475"];

// A time chart whose series may come and go: it keeps each series' history and rebuilds uPlot when they change.
class TimeChart {
  constructor(element) {
    this.element = element;
    this.times = [];
    this.history = new Map();
    this.plot = null;
    this.names = "";
  }

  add(timeS, values) {
    this.times.push(timeS);
    for (const [name, value] of Object.entries(values)) {
      if (!this.history.has(name)) this.history.set(name, new Array(this.times.length - 1).fill(null));
    }
    for (const [name, points] of this.history) points.push(name in values ? values[name] : null);
    if (this.times.length > HISTORY_POINTS_MAX) {
      this.times.shift();
      for (const points of this.history.values()) points.shift();
    }
    for (const [name, points] of this.history) {
      if (points.every((v) => v === null)) this.history.delete(name);
    }
    this.draw();
  }

  draw() {
    const names = [...this.history.keys()];
    const data = [this.times, ...names.map((n) => this.history.get(n))];
    const points = this.times.length;
    this.element.dataset.series = String(names.length);
    this.element.dataset.points = String(names.length ? points : 0);
    if (!names.length) {
      if (this.plot) { this.plot.destroy(); this.plot = null; this.names = ""; }
      this.element.innerHTML = `<div class="empty">${this.element.dataset.title}: no data yet</div>`;
      return;
    }
    const width = Math.max(300, this.element.clientWidth || 600);
    if (this.plot && this.names === names.join("\n")) {
      this.plot.setData(data);
      return;
    }
    if (this.plot) this.plot.destroy();
    this.element.innerHTML = "";
    this.names = names.join("\n");
    this.plot = new uPlot({
      title: this.element.dataset.title, width, height: 220,
      series: [{}, ...names.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true }))],
      axes: [{}, { size: 60 }],
    }, data, this.element);
  }
}

const charts = {
  topics: new TimeChart(document.getElementById("chart-topics")),
  groups: new TimeChart(document.getElementById("chart-groups")),
  queues: new TimeChart(document.getElementById("chart-queues")),
};
let previous = null;

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  return td;
}

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map((values) => {
    const tr = document.createElement("tr");
    tr.append(...values.map(cell));
    return tr;
  }));
}

function rate(now, before, seconds) {
  if (now === null || before === null || before === undefined || seconds <= 0) return null;
  return Math.max(0, (now - before) / seconds);
}

function fixed(value) {
  return value === null ? null : value.toFixed(value < 10 ? 1 : 0);
}

function showCluster(snap) {
  const alive = snap.brokers.filter((b) => b.alive).length;
  const partitions = snap.topics.flatMap((t) => t.partitions);
  const leaderless = partitions.filter((p) => p.leader_id === null).length;
  const under = partitions.filter((p) => p.isr.length < p.replicas.length).length;
  document.getElementById("broker-count").textContent = `${alive}/${snap.brokers.length}`;
  document.getElementById("controller").textContent = snap.controller_id ?? "none";
  document.getElementById("topic-count").textContent = snap.topics.length;
  document.getElementById("leaderless").textContent = leaderless;
  document.getElementById("under-replicated").textContent = under;
  const healthy = alive === snap.brokers.length && snap.controller_id !== null && !leaderless && !under;
  const health = document.getElementById("health");
  health.textContent = healthy ? "healthy" : (snap.controller_id === null ? "no controller" : "degraded");
  health.className = "badge " + (healthy ? "ok" : snap.controller_id === null ? "down" : "degraded");
  fillTable("brokers", snap.brokers.map((b) => [b.broker_id, b.address, b.raft_address, b.alive ? "yes" : "no",
    b.state || "active", b.broker_id === snap.controller_id ? "controller" : ""]));
}

function showTopics(snap, seconds) {
  const before = new Map((previous?.topics || []).map((t) => [t.name, t.high_watermark_total]));
  const rates = {};
  fillTable("topic-table", snap.topics.map((t) => {
    const r = t.kind === "stream" ? rate(t.high_watermark_total, before.get(t.name), seconds) : null;
    if (r !== null) rates[t.name] = r;
    return [t.name, t.kind, t.partitions.length,
      t.partitions.map((p) => `${p.partition}:${p.leader_id ?? "-"}`).join(" "),
      t.partitions.map((p) => `${p.partition}:[${p.isr.join(",")}]`).join(" "),
      t.high_watermark_total, fixed(r)];
  }));
  if (previous) charts.topics.add(snap.time_ms / 1000, rates);
}

function showGroups(snap) {
  const lags = {};
  fillTable("group-table", snap.groups.items.map((g) => {
    if (g.lag_records !== null) lags[g.name] = g.lag_records;
    return [g.name, g.state, g.generation, g.members, g.topics.join(", "), g.lag_records,
      g.lag_s === null ? null : g.lag_s.toFixed(1)];
  }));
  document.getElementById("groups-error").textContent = snap.groups.error ? snap.groups.error.message : "";
  charts.groups.add(snap.time_ms / 1000, lags);
}

// Messages that left a queue (acked or deleted): enqueued minus what is still held or was dead-lettered.
function settled(q) {
  return q.enqueued_total - q.ready - q.delayed - q.in_flight - q.dead - q.dead_lettered;
}

function showQueues(snap, seconds) {
  const before = new Map((previous?.queues.items || []).map((q) => [q.topic, q]));
  const counts = {};
  fillTable("queue-table", snap.queues.items.map((q) => {
    const old = before.get(q.topic);
    counts[`${q.topic} ready`] = q.ready;
    counts[`${q.topic} in flight`] = q.in_flight;
    counts[`${q.topic} dead`] = q.dead + q.dead_lettered;
    return [q.topic, q.ready, q.delayed, q.in_flight, q.dead, q.dead_lettered,
      fixed(rate(q.enqueued_total, old?.enqueued_total, seconds)),
      fixed(rate(settled(q), old === undefined ? null : settled(old), seconds))];
  }));
  document.getElementById("queues-error").textContent = snap.queues.error ? snap.queues.error.message : "";
  charts.queues.add(snap.time_ms / 1000, counts);
}

function showTables(snap, seconds) {
  const before = new Map((previous?.tables?.items || []).map((t) => [t.name, t.high_watermark_total]));
  const tables = snap.tables || { items: [] };
  fillTable("table-table", tables.items.map((t) => [t.name, t.cleanup_policy, t.partitions,
    t.keys_more ? `${t.keys}+` : t.keys, t.high_watermark_total,
    fixed(rate(t.high_watermark_total, before.get(t.name), seconds))]));
  document.getElementById("tables-error").textContent = tables.error ? tables.error.message : "";
}

async function refresh() {
  try {
    const response = await fetch("/v1/dashboard", { cache: "no-store" });
    const snap = await response.json();
    if (!response.ok) throw new Error(snap.error ? `${snap.error.code}: ${snap.error.message}` : response.statusText);
    const seconds = previous ? (snap.time_ms - previous.time_ms) / 1000 : 0;
    showCluster(snap);
    showTopics(snap, seconds);
    showGroups(snap);
    showQueues(snap, seconds);
    showTables(snap, seconds);
    previous = snap;
    document.getElementById("updated").textContent = `updated ${new Date(snap.time_ms).toLocaleTimeString()}`;
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (err) {
    const health = document.getElementById("health");
    health.textContent = `unreachable: ${err.message}`;
    health.className = "badge down";
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();
