// The run page: a top-down replay of the server's re-simulated trace, with ghosts in step,
// play/pause/scrub, speed and stage time, split deltas against the record, and a
// speed-vs-distance chart. Every text shown comes in through textContent.
const COLORS = ["#d62828", "#2a6fdb", "#f59f00", "#7b2cbf"];
const viewer = document.getElementById("viewer");
const cfg = JSON.parse(viewer.dataset.config);
const track = document.getElementById("track");
const chart = document.getElementById("chart");
const ctx = track.getContext("2d");
const cctx = chart.getContext("2d");
const el = (id) => document.getElementById(id);

async function getTrace(id) {
  const r = await fetch(`/api/v1/runs/${encodeURIComponent(id)}/trace`);
  if (!r.ok) throw new Error(`trace of ${id}: HTTP ${r.status}`);
  return r.json();
}

async function getRun(id) {
  const r = await fetch(`/api/v1/runs/${encodeURIComponent(id)}`);
  return r.ok ? r.json() : null;
}

function indexAt(tr, t) {
  // last sample with time <= t (binary search)
  let lo = 0, hi = tr.t.length - 1;
  if (t <= tr.t[0]) return 0;
  if (t >= tr.t[hi]) return hi;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (tr.t[mid] <= t) lo = mid; else hi = mid;
  }
  return lo;
}

function fmtDelta(d) {
  const s = (d >= 0 ? "+" : "-") + Math.abs(d).toFixed(3);
  return s;
}

function setup(main, others) {
  const g = main.stage;
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  g.x.forEach((x, i) => {
    const h = g.hw[i] + 5;
    x0 = Math.min(x0, x - h); x1 = Math.max(x1, x + h);
    y0 = Math.min(y0, g.y[i] - h); y1 = Math.max(y1, g.y[i] + h);
  });
  const pad = 10;
  const s = Math.min((track.width - 2 * pad) / (x1 - x0), (track.height - 2 * pad) / (y1 - y0));
  const ox = pad + ((track.width - 2 * pad) - (x1 - x0) * s) / 2;
  const oy = pad + ((track.height - 2 * pad) - (y1 - y0) * s) / 2;
  const X = (x) => ox + (x - x0) * s;
  const Y = (y) => track.height - (oy + (y - y0) * s);

  // the stage, drawn once from its geometry into an offscreen canvas
  const bg = document.createElement("canvas");
  bg.width = track.width; bg.height = track.height;
  const b = bg.getContext("2d");
  b.lineCap = "round"; b.lineJoin = "round";
  b.strokeStyle = "#8d8a83";
  for (let i = 1; i < g.x.length; i++) {
    b.lineWidth = Math.max(2, (g.hw[i - 1] + g.hw[i]) * s);
    b.beginPath(); b.moveTo(X(g.x[i - 1]), Y(g.y[i - 1])); b.lineTo(X(g.x[i]), Y(g.y[i])); b.stroke();
  }
  b.strokeStyle = "#ffffff"; b.lineWidth = 1; b.setLineDash([4, 6]);
  b.beginPath(); b.moveTo(X(g.x[0]), Y(g.y[0]));
  for (let i = 1; i < g.x.length; i++) b.lineTo(X(g.x[i]), Y(g.y[i]));
  b.stroke(); b.setLineDash([]);
  const line = (l, color, w) => {
    const nx = -l.ty * (l.hw + 1), ny = l.tx * (l.hw + 1);
    b.strokeStyle = color; b.lineWidth = w;
    b.beginPath(); b.moveTo(X(l.x - nx), Y(l.y - ny)); b.lineTo(X(l.x + nx), Y(l.y + ny)); b.stroke();
  };
  g.checkpoints.forEach((c) => line(c, "#2a6fdb", 2));
  line(g.start, "#17803d", 3);
  line(g.finish, "#1d232a", 3);

  const cars = [main, ...others];
  const legend = el("legend");
  legend.replaceChildren();
  cars.forEach((tr, k) => {
    const li = document.createElement("li");
    li.style.setProperty("--c", COLORS[k % COLORS.length]);
    li.textContent = `${tr.label} ${tr.finish_time_s === null ? "" : tr.finish_time_s.toFixed(3) + " s"}`;
    legend.appendChild(li);
  });

  const car = (tr, i, color, alpha) => {
    const L = Math.max(4.5 * s, 8), W = Math.max(2.0 * s, 4);
    ctx.save();
    ctx.globalAlpha = alpha;
    ctx.translate(X(tr.x[i]), Y(tr.y[i]));
    ctx.rotate(-tr.heading[i]);
    ctx.fillStyle = color;
    ctx.fillRect(-L / 2, -W / 2, L, W);
    ctx.fillStyle = "#fff";
    ctx.fillRect(L / 2 - Math.max(1, L * 0.2), -W / 2, Math.max(1, L * 0.2), W);
    ctx.restore();
  };

  // the chart: speed against distance, this run and the record
  const maxP = Math.max(...cars.map((c) => c.progress[c.progress.length - 1]), 1);
  const maxV = Math.max(...cars.map((c) => Math.max(...c.speed)), 1) * 3.6;
  const CX = (p) => 40 + (p / maxP) * (chart.width - 50);
  const CY = (v) => chart.height - 25 - (v / maxV) * (chart.height - 35);
  const drawChart = (p) => {
    cctx.clearRect(0, 0, chart.width, chart.height);
    cctx.strokeStyle = "#c9ced6"; cctx.lineWidth = 1;
    cctx.beginPath(); cctx.moveTo(40, 10); cctx.lineTo(40, chart.height - 25); cctx.lineTo(chart.width - 10, chart.height - 25); cctx.stroke();
    cctx.fillStyle = "#4a5563"; cctx.font = "11px system-ui";
    cctx.fillText(`${Math.round(maxV)} km/h`, 2, 14);
    cctx.fillText(`${Math.round(maxP)} m`, chart.width - 50, chart.height - 8);
    cars.slice(0, 2).forEach((tr, k) => {
      cctx.strokeStyle = COLORS[k]; cctx.lineWidth = 1.5; cctx.beginPath();
      tr.progress.forEach((pr, i) => {
        const x = CX(pr), y = CY(tr.speed[i] * 3.6);
        if (i === 0) cctx.moveTo(x, y); else cctx.lineTo(x, y);
      });
      cctx.stroke();
    });
    cctx.strokeStyle = "#1d232a"; cctx.beginPath(); cctx.moveTo(CX(p), 10); cctx.lineTo(CX(p), chart.height - 25); cctx.stroke();
  };

  const end = main.t[main.t.length - 1];
  const scrub = el("scrub");
  scrub.max = String(main.t.length - 1);
  let t = 0, playing = false, last = null;
  const record = cars.find((c) => c.id === cfg.record && c !== main) || null;

  const draw = () => {
    const i = indexAt(main, t);
    ctx.clearRect(0, 0, track.width, track.height);
    ctx.drawImage(bg, 0, 0);
    for (let k = others.length; k >= 1; k--) car(others[k - 1], indexAt(others[k - 1], t), COLORS[k % COLORS.length], 0.45);
    car(main, i, COLORS[0], 1);
    el("time").textContent = main.t[i].toFixed(3);
    el("speed").textContent = (main.speed[i] * 3.6).toFixed(0);
    scrub.value = String(i);
    // the split delta against the record at the last line this run has crossed
    let delta = "-";
    if (record) {
      const mine = [...main.checkpoint_times_s, main.finish_time_s];
      const theirs = [...record.checkpoint_times_s, record.finish_time_s];
      for (let k = mine.length - 1; k >= 0; k--) {
        if (mine[k] !== null && mine[k] <= main.t[i] && theirs[k] !== null && theirs[k] !== undefined) {
          delta = fmtDelta(mine[k] - theirs[k]);
          break;
        }
      }
    } else if (cfg.record === cfg.run) {
      delta = "record";
    }
    const d = el("delta");
    d.textContent = delta;
    d.className = delta.startsWith("+") ? "delta-plus" : delta.startsWith("-") && delta !== "-" ? "delta-minus" : "";
    drawChart(main.progress[i]);
    track.dataset.frame = String(i);
  };

  const tick = (now) => {
    if (!playing) return;
    if (last !== null) t = Math.min(end, t + ((now - last) / 1000) * Number(el("rate").value));
    last = now;
    draw();
    if (t >= end) { playing = false; el("play").textContent = "play"; return; }
    requestAnimationFrame(tick);
  };
  el("play").addEventListener("click", () => {
    playing = !playing;
    el("play").textContent = playing ? "pause" : "play";
    if (playing) { if (t >= end) t = 0; last = null; requestAnimationFrame(tick); }
  });
  scrub.addEventListener("input", () => { t = main.t[Number(scrub.value)]; draw(); });
  draw();
  track.dataset.ready = "1";
}

async function main() {
  const ids = [cfg.run, ...cfg.ghosts.filter((g) => g !== cfg.run)];
  if (cfg.record && !ids.includes(cfg.record)) ids.push(cfg.record);
  const traces = await Promise.all(ids.slice(0, 4).map(async (id) => {
    const [tr, info] = await Promise.all([getTrace(id), getRun(id)]);
    tr.id = id;
    tr.label = info ? info.player : id.slice(0, 8);
    return tr;
  }));
  const [mine, ...others] = traces;
  const order = others.sort((a, b) => (a.id === cfg.record ? -1 : b.id === cfg.record ? 1 : 0));
  setup(mine, order.slice(0, 3));
}

main().catch((e) => {
  const p = document.createElement("p");
  p.className = "status rejected";
  p.textContent = `cannot show the run: ${e.message}`;
  viewer.prepend(p);
});
