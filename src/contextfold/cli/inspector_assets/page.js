"use strict";
// The contextfold inspector: plain JS, no framework, nothing fetched. The page's data is
// the JSON block "page-data" (each run's summary and timeline envelope) and compressed
// chunks (raw deflate, base64) inflated when a zoom or a click needs them.
(function () {
  const DATA = JSON.parse(document.getElementById("page-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 960, HEIGHT = 320, COST_HEIGHT = 170;
  const PAD = { left: 64, right: 56, top: 26, bottom: 30 };
  const MAX_POINTS = 2000; // points drawn per line, as the PNG chart
  const DETAIL_SPAN = 40000; // a zoom this narrow reads every request of its range
  const PAGE = 50; // compactions listed per page
  const VIEW_ROWS = 400; // view rows shown before "show all"
  const ROLES = { s: "system", u: "user", a: "assistant", t: "tool", d: "developer", o: "other" };
  const chunks = new Map();
  const state = { run: null, range: null, selected: null, passPage: 0, showAll: false };

  // -- data ---------------------------------------------------------------------------------

  function chunk(name) {
    if (!chunks.has(name)) {
      const element = document.getElementById(name);
      if (!element) return Promise.resolve(null);
      const binary = atob(element.textContent.trim());
      const bytes = new Uint8Array(binary.length);
      for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
      chunks.set(name, new Response(stream).text().then(JSON.parse));
    }
    return chunks.get(name);
  }

  async function rowsOf(run, first, last) {
    // Requests first..last (1-based, inclusive) as row objects.
    const out = [];
    for (let c = Math.floor((first - 1) / run.rowChunk); c <= Math.floor((last - 1) / run.rowChunk); c++) {
      const part = await chunk(`r${run.id}-rows-${c}`);
      if (!part) continue;
      const base = c * run.rowChunk;
      for (let k = 0; k < part.after.length; k++) {
        const request = base + k + 1;
        if (request < first || request > last) continue;
        out.push(rowAt(part, k, request));
      }
    }
    return out;
  }

  function rowAt(part, k, request) {
    const pick = (name) => (part[name] ? part[name][k] : null);
    const cost = {};
    for (const name of Object.keys(part.cost)) cost[name] = part.cost[name][k];
    return {
      request, after: pick("after"), messages: pick("messages"), before: pick("before"),
      history: pick("history"), prefix: pick("prefix"), share: pick("share"),
      compacted: !!pick("compacted"), level: pick("level"), applied: pick("applied") || [],
      refused: !!pick("refused"), cost,
    };
  }

  async function messagesOf(run, indexes) {
    const byChunk = new Map();
    for (const i of indexes) {
      const c = Math.floor(i / run.messageChunk);
      if (!byChunk.has(c)) byChunk.set(c, []);
      byChunk.get(c).push(i);
    }
    const out = new Map();
    for (const [c, list] of byChunk) {
      const part = await chunk(`r${run.id}-msgs-${c}`);
      for (const i of list) {
        const k = i - c * run.messageChunk;
        out.set(i, {
          role: ROLES[part.role[k]] || "other", unit: part.unit[k], tokens: part.tokens[k],
          sent: part.sent[k] === "1", preview: part.preview[k],
        });
      }
    }
    return out;
  }

  async function passAt(run, number) {
    const part = await chunk(`r${run.id}-passes-${Math.floor(number / run.passChunk)}`);
    return part ? part[number % run.passChunk] : null;
  }

  function passBefore(run, request) {
    // The last pass made at or before `request`, or -1.
    const list = run.passRequests || [];
    let low = 0, high = list.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (list[middle] <= request) low = middle + 1; else high = middle;
    }
    return low - 1;
  }

  async function viewOf(run, request, row) {
    // The view of a request: its pass's layout, then the messages appended since, in the
    // order their units stand (see contextfold.inspection.Inspection.view_of).
    const items = [];
    const number = passBefore(run, request);
    let start = 0;
    let pass = null;
    if (number >= 0) {
      pass = await passAt(run, number);
      const changed = new Map(pass.changed.map(([index, status, text]) => [index, [status, text]]));
      for (const [first, end] of pass.layout) {
        if (first === -1) items.push({ status: "notice", text: pass.notice });
        else if (first === -2) items.push({ status: "summary", text: pass.summary });
        else for (let i = first; i < end; i++) {
          const change = changed.get(i);
          items.push(change ? { status: change[0], index: i, text: change[1] } : { status: "kept", index: i });
        }
      }
      start = pass.messages;
    }
    const tail = [];
    for (let i = start; i < row.messages; i++) tail.push(i);
    const facts = await messagesOf(run, tail);
    const appended = tail.filter((i) => facts.get(i).sent);
    appended.sort((a, b) => facts.get(a).unit - facts.get(b).unit || a - b);
    for (const i of appended) items.push({ status: "kept", index: i });
    return { items, pass, passNumber: number };
  }

  // -- drawing ------------------------------------------------------------------------------

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const key in attrs || {}) node.setAttribute(key, attrs[key]);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  const fmt = (n) => (n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US"));
  const usd = (n) => (n === null || n === undefined ? "–" : "$" + n.toFixed(n < 0.01 ? 5 : 4));
  const pct = (n) => (n === null || n === undefined ? "–" : (100 * n).toFixed(1) + "%");
  const rid = (i) => "r" + i;

  function envelope(points, key) {
    // At most MAX_POINTS points: each stretch's lowest and highest, in order.
    if (points.length <= MAX_POINTS) return points;
    const buckets = MAX_POINTS / 2, kept = new Set([0, points.length - 1]);
    for (let b = 0; b < buckets; b++) {
      const from = Math.floor((b * points.length) / buckets), to = Math.floor(((b + 1) * points.length) / buckets);
      let low = from, high = from;
      for (let i = from; i < to; i++) {
        if (points[i][key] < points[low][key]) low = i;
        if (points[i][key] > points[high][key]) high = i;
      }
      kept.add(low); kept.add(high);
    }
    return [...kept].sort((a, b) => a - b).map((i) => points[i]);
  }

  async function visible(run) {
    // The points and markers of the current range: every request when the range is narrow
    // enough to read, else the page's envelope.
    const [x0, x1] = state.range;
    if (x1 - x0 + 1 <= DETAIL_SPAN && run.requests > 0) {
      const rows = await rowsOf(run, x0, x1);
      const points = rows.map((r) => ({
        x: r.request, sent: r.after, history: r.history, share: r.share,
        cost: r.cost[run.pricings[0]] ?? null,
      }));
      let marks = rows.filter((r) => r.compacted).map((r) => ({ request: r.request, size: r.after }));
      if (run.passRequests) {
        const inRange = new Set(run.passRequests.filter((q) => q >= x0 && q <= x1));
        marks = rows.filter((r) => inRange.has(r.request)).map((r) => ({ request: r.request, size: r.after }));
      }
      if (marks.length > MAX_POINTS) marks = envelope(marks, "size");
      return { points: envelope(points, "sent"), marks };
    }
    const t = run.timeline, points = [];
    for (let k = 0; k < t.x.length; k++) {
      if (t.x[k] < x0 || t.x[k] > x1) continue;
      points.push({
        x: t.x[k], sent: t.sent[k], history: t.history ? t.history[k] : null,
        share: t.share ? t.share[k] : null,
        cost: run.pricings.length ? t.cost[run.pricings[0]][k] : null,
      });
    }
    const marks = run.markers.filter((m) => m.request >= x0 && m.request <= x1);
    return { points, marks };
  }

  function scaleX(x) {
    const [x0, x1] = state.range;
    const span = Math.max(x1 - x0, 1);
    return PAD.left + ((x - x0) / span) * (WIDTH - PAD.left - PAD.right);
  }

  function requestAt(px) {
    const [x0, x1] = state.range;
    const share = (px - PAD.left) / (WIDTH - PAD.left - PAD.right);
    return Math.min(x1, Math.max(x0, Math.round(x0 + share * (x1 - x0))));
  }

  function ticks(low, high, count) {
    const span = high - low > 0 ? high - low : 1, raw = span / count;
    const step = Math.pow(10, Math.floor(Math.log10(raw)));
    const nice = [1, 2, 5, 10].map((m) => m * step).find((s) => span / s <= count) || step * 10;
    const out = [];
    for (let v = Math.ceil(low / nice) * nice; v <= high; v += nice) out.push(v);
    return out;
  }

  function axes(svg, height, yMax, yLabel, yFormat) {
    const bottom = height - PAD.bottom;
    const y = (v) => bottom - (v / yMax) * (bottom - PAD.top);
    for (const v of ticks(0, yMax, 5)) {
      el("line", { class: "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v) }, svg);
      el("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, svg).textContent = yFormat(v);
    }
    const [x0, x1] = state.range;
    for (const v of ticks(x0, x1, 8)) {
      if (!Number.isInteger(v)) continue;
      el("text", { x: scaleX(v), y: bottom + 16, "text-anchor": "middle" }, svg).textContent = fmt(v);
    }
    el("line", { class: "axis", x1: PAD.left, x2: WIDTH - PAD.right, y1: bottom, y2: bottom }, svg);
    el("text", { x: 12, y: 14, "text-anchor": "start" }, svg).textContent = yLabel;
    return y;
  }

  function polyline(svg, points, key, y, cls, id) {
    const list = points.filter((p) => p[key] !== null && p[key] !== undefined);
    if (!list.length) return null;
    const attrs = { class: cls, points: list.map((p) => `${scaleX(p.x).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ") };
    if (id) attrs.id = id;
    return el("polyline", attrs, svg);
  }

  async function drawCharts() {
    const run = state.run;
    const { points, marks } = await visible(run);
    const timeline = document.getElementById("timeline");
    timeline.replaceChildren();
    timeline.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
    const limits = [run.window, run.budget, run.trigger].filter((v) => v);
    // The scale follows what was sent and the limits; the whole history, which grows far
    // past them in a long run, is drawn up to the top and clipped there.
    const top = Math.max(1, ...points.map((p) => p.sent || 0), ...limits) * 1.25;
    const y = axes(timeline, HEIGHT, top, "tokens per request", fmt);
    const clip = el("clipPath", { id: "plot-area" }, el("defs", {}, timeline));
    el("rect", { x: PAD.left, y: PAD.top, width: WIDTH - PAD.left - PAD.right, height: HEIGHT - PAD.top - PAD.bottom }, clip);
    const line = (value, cls, title) => {
      if (!value) return;
      const node = el("line", { class: cls, x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value) }, timeline);
      el("title", {}, node).textContent = `${title}: ${fmt(value)}`;
    };
    line(run.window, "limit-window", "window");
    line(run.budget, "limit-budget", "budget");
    line(run.trigger, "limit-trigger", "compaction trigger");
    const history = polyline(timeline, points, "history", y, "history", "history-line");
    if (history) history.setAttribute("clip-path", "url(#plot-area)");
    polyline(timeline, points, "sent", y, "sent", "sent-line");
    const markerGroup = el("g", { id: "markers" }, timeline);
    for (const m of marks) {
      const cx = scaleX(m.request), cy = y(m.size) - 7;
      const node = el("path", {
        class: "marker", "data-request": m.request,
        d: `M${(cx - 5).toFixed(1)},${(cy - 6).toFixed(1)} h10 l-5,8 z`,
      }, markerGroup);
      if (state.selected === m.request) node.classList.add("chosen");
      el("title", {}, node).textContent = `compaction at request ${fmt(m.request)}`;
    }
    timeline.dataset.points = String(points.length);
    timeline.dataset.markers = String(marks.length);
    if (state.selected !== null && state.selected >= state.range[0] && state.selected <= state.range[1]) {
      el("line", { class: "cursor", x1: scaleX(state.selected), x2: scaleX(state.selected), y1: PAD.top, y2: HEIGHT - PAD.bottom }, timeline);
    }
    document.getElementById("range-label").textContent =
      `requests ${fmt(state.range[0])}–${fmt(state.range[1])} of ${fmt(run.requests)}`;

    const costs = document.getElementById("costs");
    costs.replaceChildren();
    costs.setAttribute("viewBox", `0 0 ${WIDTH} ${COST_HEIGHT}`);
    const pricing = run.pricings[0];
    const costTop = Math.max(1e-9, ...points.map((p) => p.cost || 0)) * 1.1;
    const yc = axes(costs, COST_HEIGHT, costTop, pricing ? `USD per request (${pricing})` : "no prices", (v) => "$" + v.toPrecision(2));
    polyline(costs, points, "cost", yc, "cost", "cost-line");
    const bottom = COST_HEIGHT - PAD.bottom;
    const ys = (v) => bottom - v * (bottom - PAD.top);
    polyline(costs, points, "share", ys, "share", "share-line");
    for (const v of [0, 0.5, 1]) {
      el("text", { x: WIDTH - PAD.right + 6, y: ys(v) + 4 }, costs).textContent = pct(v);
    }
  }

  function bindChart(svg) {
    let start = null, brush = null;
    const point = (event) => {
      const box = svg.getBoundingClientRect();
      return ((event.clientX - box.left) / box.width) * WIDTH;
    };
    svg.addEventListener("mousedown", (event) => {
      if (event.target.classList.contains("marker")) return;
      start = point(event);
      brush = el("rect", { class: "brush", x: start, y: PAD.top, width: 0, height: 10 }, svg);
    });
    svg.addEventListener("mousemove", (event) => {
      if (start === null) return;
      const now = point(event);
      brush.setAttribute("x", Math.min(start, now));
      brush.setAttribute("width", Math.abs(now - start));
      brush.setAttribute("height", svg.viewBox.baseVal.height - PAD.top - PAD.bottom);
    });
    const finish = (event) => {
      if (start === null) return;
      const end = point(event);
      const first = requestAt(Math.min(start, end)), last = requestAt(Math.max(start, end));
      start = null;
      if (brush) brush.remove();
      if (Math.abs(end - first) > 0 && last - first >= 2 && Math.abs(scaleX(last) - scaleX(first)) > 6) {
        zoom(first, last);
      } else {
        select(requestAt(end));
      }
    };
    svg.addEventListener("mouseup", finish);
    svg.addEventListener("mouseleave", () => { start = null; if (brush) brush.remove(); });
    svg.addEventListener("click", (event) => {
      const target = event.target;
      if (target.classList && target.classList.contains("marker")) {
        event.stopPropagation();
        select(Number(target.dataset.request));
      }
    });
  }

  async function zoom(first, last) {
    const run = state.run;
    state.range = [Math.max(1, first), Math.min(run.requests, Math.max(last, first + 1))];
    await drawCharts();
  }

  // -- panels -------------------------------------------------------------------------------

  function renderFacts(run) {
    const facts = document.getElementById("facts");
    facts.replaceChildren();
    const entries = [
      ["requests", fmt(run.requests)], ["messages", run.messages === null ? "–" : fmt(run.messages)],
      ["compactions", fmt(run.passes)], ["window", fmt(run.window)], ["budget", fmt(run.budget)],
      ["trigger", fmt(run.trigger)],
    ];
    for (const [key, value] of Object.entries(run.facts)) entries.push([key, typeof value === "number" ? fmt(value) : value]);
    for (const [key, value] of entries) {
      const span = html("span", {}, key + " ");
      span.appendChild(html("b", {}, value));
      facts.appendChild(span);
    }
    const legend = document.getElementById("legend");
    legend.replaceChildren();
    for (const [label, color] of [["sent (this view)", "var(--blue)"], ["whole history", "var(--purple)"],
      ["window", "var(--red)"], ["budget", "var(--grey)"], ["trigger", "var(--orange)"]]) {
      const span = html("span", { style: `--c: ${color}` }, label);
      legend.appendChild(span);
    }
  }

  async function renderPasses(run) {
    const section = document.getElementById("passes");
    const body = section.querySelector("tbody");
    body.replaceChildren();
    const requests = run.passRequests || run.markers.map((m) => m.request);
    const pages = Math.max(1, Math.ceil(requests.length / PAGE));
    state.passPage = Math.min(state.passPage, pages - 1);
    const shown = requests.slice(state.passPage * PAGE, (state.passPage + 1) * PAGE);
    const first = state.passPage * PAGE;
    for (let k = 0; k < shown.length; k++) {
      const request = shown[k];
      const [row] = await rowsOf(run, request, request);
      if (!row) continue;
      const figures = await passFigures(run, first + k, row);
      const tr = html("tr", { class: "clickable pass-row", "data-request": request });
      for (const [text, cls] of [[fmt(request), "num"], [fmt(figures.before), "num"], [fmt(figures.after), "num"],
        [fmt(figures.saved), "num"], [figures.level ?? "–", "num"], [figures.applied.join(", ") || "–", ""]]) {
        tr.appendChild(html("td", cls ? { class: cls } : {}, text));
      }
      tr.addEventListener("click", () => select(request));
      body.appendChild(tr);
    }
    document.getElementById("pass-page").textContent =
      requests.length ? `page ${state.passPage + 1} of ${pages} (${fmt(requests.length)} compactions)` : "no compaction";
  }

  async function passFigures(run, number, row) {
    // What a pass did, as its request's report said (the context's estimates); a run
    // without recorded views has only its row.
    const pass = run.hasViews && number >= 0 ? await passAt(run, number) : null;
    const before = pass ? pass.before : row.before;
    const after = pass ? pass.after : row.after;
    return {
      before, after, saved: before !== null && after !== null ? before - after : null,
      level: pass ? pass.passLevel : row.level, applied: pass ? pass.applied : row.applied,
    };
  }

  async function select(request) {
    state.selected = request;
    state.showAll = false;
    await drawCharts();
    await renderDetails();
  }

  async function renderDetails() {
    const run = state.run, request = state.selected;
    const details = document.getElementById("details");
    details.dataset.ready = "";
    details.replaceChildren();
    const [row] = await rowsOf(run, request, request);
    if (!row) return;
    details.dataset.request = String(request);
    details.appendChild(html("h2", {}, `Request ${fmt(request)}`));
    const figures = html("div", { class: "facts" });
    const add = (key, value) => {
      const span = html("span", {}, key + " ");
      span.appendChild(html("b", {}, value));
      figures.appendChild(span);
    };
    add("history messages", fmt(row.messages));
    add("tokens sent", fmt(row.after));
    if (row.before !== null) add("before its pass", fmt(row.before));
    if (row.history !== null) add("whole history", fmt(row.history));
    if (row.share !== null) add("cache share", pct(row.share));
    for (const name of run.pricings) add(`cost (${name})`, usd(row.cost[name]));
    if (row.refused) add("refused", "yes");
    details.appendChild(figures);
    const passNumber = (run.passRequests || []).indexOf(request);
    if (passNumber >= 0 || row.compacted) {
      const figures = await passFigures(run, passNumber, row);
      const box = html("div", { class: "panel", id: "pass-details" });
      box.appendChild(html("h3", {}, `Compaction at request ${fmt(request)}`));
      box.appendChild(html("p", {}, `${fmt(figures.before)} → ${fmt(figures.after)} tokens` +
        (figures.saved !== null ? `, saved ${fmt(figures.saved)}` : "") + `; level ${figures.level ?? "–"}; rungs applied: ` +
        (figures.applied.length ? figures.applied.join(", ") : "–")));
      details.appendChild(box);
    }
    if (!run.hasViews) {
      details.appendChild(html("p", { class: "muted" }, "No views were recorded for this run."));
      details.dataset.ready = "1";
      return;
    }
    const { items, pass } = await viewOf(run, request, row);
    const facts = await messagesOf(run, items.filter((i) => i.index !== undefined).map((i) => i.index));
    if (pass) {
      const taken = html("div", { class: "panel", id: "taken-out" });
      taken.appendChild(html("h3", {}, "Out of this view"));
      const ranges = (list) => list.map(([a, b]) => (a === b ? rid(a) : `${rid(a)}–${rid(b)}`)).join(", ");
      const count = (list) => list.reduce((n, [a, b]) => n + b - a + 1, 0);
      taken.appendChild(html("p", { id: "dropped" }, pass.dropped.length
        ? `dropped: ${ranges(pass.dropped)} (${fmt(count(pass.dropped))} messages, recall by id)` : "dropped: none"));
      taken.appendChild(html("p", { id: "summarized" }, pass.summarized.length
        ? `summarized: ${ranges(pass.summarized)} (${fmt(count(pass.summarized))} messages)` : "summarized: none"));
      const rungs = Object.entries(pass.rungs).map(([k, v]) => `${k} ${v}`).join(", ");
      taken.appendChild(html("p", { class: "muted" }, `since the start: ${rungs || "nothing"}; pass of request ${fmt(pass.request)}, level ${pass.level}`));
      if (pass.notice) {
        taken.appendChild(html("h3", {}, `The notice (${fmt(pass.noticeTokens)} tokens)`));
        taken.appendChild(html("pre", { id: "notice-text" }, pass.notice));
      }
      if (pass.summary) {
        taken.appendChild(html("h3", {}, "The summary"));
        taken.appendChild(html("pre", { id: "summary-text" }, pass.summary));
      }
      details.appendChild(taken);
    }
    details.appendChild(html("h3", {}, `Its view: ${fmt(items.length)} items`));
    const table = html("table", { id: "view-table" });
    const head = html("tr");
    for (const [label, cls] of [["#", "num"], ["id", ""], ["role", ""], ["status", ""], ["tokens", "num"], ["what it says", ""]]) {
      head.appendChild(html("th", cls ? { class: cls } : {}, label));
    }
    table.appendChild(html("thead")).appendChild(head);
    const body = table.appendChild(html("tbody"));
    const limit = state.showAll ? items.length : Math.min(items.length, VIEW_ROWS);
    for (let k = 0; k < limit; k++) {
      const item = items[k];
      const fact = item.index !== undefined ? facts.get(item.index) : null;
      const tr = html("tr", { "data-status": item.status, "data-index": item.index !== undefined ? item.index : item.status });
      tr.appendChild(html("td", { class: "num" }, k + 1));
      tr.appendChild(html("td", {}, item.index !== undefined ? rid(item.index) : ""));
      tr.appendChild(html("td", {}, fact ? fact.role : "context-fold"));
      const status = html("td");
      status.appendChild(html("span", { class: `status status-${item.status}` }, item.status));
      tr.appendChild(status);
      tr.appendChild(html("td", { class: "num" }, fact ? fmt(fact.tokens) : ""));
      const text = item.text !== undefined && item.text !== null ? item.text : fact ? fact.preview : "";
      tr.appendChild(html("td", { class: "preview" }, item.status === "notice" || item.status === "summary" ? (text || "").slice(0, 200) : text));
      body.appendChild(tr);
    }
    details.appendChild(table);
    if (limit < items.length) {
      const more = html("button", { id: "show-all" }, `show all ${fmt(items.length)}`);
      more.addEventListener("click", async () => { state.showAll = true; await renderDetails(); });
      details.appendChild(more);
    }
    details.dataset.ready = "1";
  }

  async function openRun(id) {
    const run = DATA.runs[id];
    state.run = run;
    state.range = [1, Math.max(run.requests, 1)];
    state.selected = run.requests ? run.requests : null;
    state.passPage = 0;
    renderFacts(run);
    await drawCharts();
    await renderPasses(run);
    if (state.selected !== null) await renderDetails();
  }

  async function main() {
    document.getElementById("title").textContent = DATA.title;
    const chooser = document.getElementById("run-select");
    DATA.runs.forEach((run, i) => chooser.appendChild(html("option", { value: i }, run.label)));
    chooser.hidden = DATA.runs.length < 2;
    chooser.addEventListener("change", () => openRun(Number(chooser.value)));
    bindChart(document.getElementById("timeline"));
    bindChart(document.getElementById("costs"));
    document.getElementById("zoom-out").addEventListener("click", () => zoom(1, state.run.requests));
    document.getElementById("pass-prev").addEventListener("click", () => { state.passPage = Math.max(0, state.passPage - 1); renderPasses(state.run); });
    document.getElementById("pass-next").addEventListener("click", () => { state.passPage += 1; renderPasses(state.run); });
    await openRun(0);
    document.body.dataset.ready = "1";
  }

  function skeleton() {
    document.body.insertAdjacentHTML("beforeend", `
<header><h1 id="title"></h1><select id="run-select" aria-label="run"></select></header>
<div class="facts" id="facts"></div>
<div class="panel"><div class="toolbar"><span>Drag across the chart to zoom in; click a request or a ▼ compaction to see its view.</span>
<button id="zoom-out">whole run</button><span id="range-label"></span></div>
<svg class="chart" id="timeline" role="img" aria-label="request sizes"></svg><div class="legend" id="legend"></div>
<svg class="chart" id="costs" role="img" aria-label="cost and cache share per request"></svg>
<div class="legend"><span style="--c: var(--green)">cost per request</span><span style="--c: var(--orange)">cache share (right axis)</span></div></div>
<div class="panel" id="passes"><h2>Compactions</h2><table><thead><tr><th class="num">request</th><th class="num">before</th>
<th class="num">after</th><th class="num">saved</th><th class="num">level</th><th>rungs applied</th></tr></thead><tbody></tbody></table>
<div class="pager"><button id="pass-prev">previous</button><button id="pass-next">next</button><span id="pass-page"></span></div></div>
<div class="panel" id="details"></div>`);
  }

  skeleton();
  main().catch((error) => { console.error(error); document.body.dataset.ready = "error"; });
})();
