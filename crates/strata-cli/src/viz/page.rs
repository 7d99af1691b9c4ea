//! The HTML page: one file, styles and script inline, the data inline as JSON; it loads
//! nothing from the network. When it has drawn everything it adds `<div id="drawn">`; an
//! error anywhere in its script adds `<div id="error">` with the message (headless tests
//! read both).

use super::VizData;

/// The page for `data`.
pub fn html(data: &VizData) -> String {
    // `</` inside a script element would end it: JSON escapes the slash.
    let json = serde_json::to_string(data)
        .unwrap_or_else(|_| "null".to_owned())
        .replace("</", "<\\/");
    let title = escape(&data.title);
    TEMPLATE
        .replace("{{TITLE}}", &title)
        .replace("{{DATA}}", &json)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const TEMPLATE: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>strata memory: {{TITLE}}</title>
<style>
  body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; }
  h1 { font-size: 18px; margin: 0 0 8px; }
  .controls { margin: 8px 0; }
  .controls label { margin-right: 16px; }
  canvas { border: 1px solid #ccc; display: block; margin: 4px 0 12px; }
  #legend span { display: inline-block; margin: 2px 10px 2px 0; }
  #legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
  table { border-collapse: collapse; }
  td, th { padding: 2px 8px; text-align: left; border-bottom: 1px solid #eee; }
  td.n { text-align: right; font-variant-numeric: tabular-nums; }
  .note { color: #a40; }
  #error { color: #fff; background: #c00; padding: 8px; }
</style>
</head>
<body>
<h1>Memory of {{TITLE}}</h1>
<div id="notes"></div>
<div class="controls">
  <label>Stack by
    <select id="groupBy">
      <option value="0">category</option>
      <option value="1">scope</option>
      <option value="2">site</option>
    </select>
  </label>
  <button id="whole" type="button">whole trace</button>
  <span id="summary"></span>
</div>
<div id="view"></div>
<canvas id="timeline" width="1100" height="320" title="drag to zoom into a window; click to show that moment"></canvas>
<div id="legend"></div>
<div class="controls">
  <label>Moment <input id="moment" type="range" min="0" max="0" value="0" style="width:600px"></label>
  <span id="momentText"></span>
</div>
<canvas id="segments" width="1100" height="260"></canvas>
<h2 style="font-size:15px">Largest holders at the peak</h2>
<table id="holders"><thead><tr><th>site</th><th>bytes</th><th>blocks</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
window.onerror = function (message, source, line) {
  var d = document.getElementById("error") || document.createElement("div");
  d.id = "error";
  d.textContent = "error: " + message + " (line " + line + ")";
  document.body.appendChild(d);
};
var ROOT = {{DATA}};
var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c"];
var OTHER = "#888888";

function fmt(b) {
  var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(2)) + " " + u[i];
}

// The groups to colour under a grouping: the largest by peak-time bytes, the rest "other".
function topGroups(kind) {
  var names = DATA.names[kind], shown;
  if (DATA.complete) {
    var total = new Array(names.length).fill(0);
    DATA.lives.forEach(function (l) {
      if (l.s <= DATA.peak_entry && DATA.peak_entry < l.e) total[l.g[kind]] += l.b;
    });
    shown = names.map(function (_, i) { return i; })
      .sort(function (a, b) { return total[b] - total[a]; }).slice(0, PALETTE.length - 1);
  } else {
    shown = DATA.summary.shown[kind];
  }
  var colour = new Array(names.length).fill(-1);
  shown.forEach(function (g, k) { colour[g] = k; });
  return { shown: shown, colour: colour };
}

// Bytes of each colour at each pixel column of the view, and reserved bytes: exactly from
// every allocation, or from the summary's columns (each drawn where its bytes peak).
function columns(kind, tg, cols) {
  var k = tg.shown.length + 1, stacks = [], reservedAt = new Float64Array(cols), j, x;
  var v0 = VIEW.from, n = Math.max(VIEW.to - VIEW.from, 1);
  if (DATA.complete) {
    var diff = [];
    for (j = 0; j < k; j++) diff.push(new Float64Array(cols + 1));
    DATA.lives.forEach(function (l) {
      if (l.e <= v0 || l.s >= VIEW.to) return;
      var slot = tg.colour[l.g[kind]]; if (slot < 0) slot = k - 1;
      var a = Math.max(0, Math.floor((l.s - v0) * cols / n));
      var b = Math.min(cols, Math.floor((l.e - v0) * cols / n));
      if (b <= a) return;
      diff[slot][a] += l.b; diff[slot][b] -= l.b;
    });
    for (j = 0; j < k; j++) {
      var run = 0, col = new Float64Array(cols);
      for (x = 0; x < cols; x++) { run += diff[j][x]; col[x] = run; }
      stacks.push(col);
    }
    var r = 0, ri = 0;
    for (x = 0; x < cols; x++) {
      var t = v0 + x * n / cols;
      while (ri < DATA.reserved.length && DATA.reserved[ri][0] <= t) { r = DATA.reserved[ri][1]; ri++; }
      reservedAt[x] = r;
    }
  } else {
    var S = DATA.summary, m = S.at.length, st = S.stacks[kind], pick = new Int32Array(cols);
    for (x = 0; x < cols; x++) {
      var c0 = Math.floor(x * m / cols), c1 = Math.max(c0 + 1, Math.floor((x + 1) * m / cols));
      var best = c0, bestSum = -1, most = 0;
      for (var c = c0; c < Math.min(c1, m); c++) {
        var sum = 0; for (j = 0; j < k; j++) sum += st[j][c];
        if (sum > bestSum) { bestSum = sum; best = c; }
        most = Math.max(most, S.reserved[c]);
      }
      pick[x] = best; reservedAt[x] = most;
    }
    for (j = 0; j < k; j++) {
      var cj = new Float64Array(cols);
      for (x = 0; x < cols; x++) cj[x] = st[j][pick[x]];
      stacks.push(cj);
    }
  }
  return { stacks: stacks, reserved: reservedAt };
}

function drawTimeline(kind) {
  var c = document.getElementById("timeline"), ctx = c.getContext("2d");
  var W = c.width, H = c.height, left = 70, bottom = 20, w = W - left - 10, h = H - bottom - 10;
  ctx.clearRect(0, 0, W, H);
  var n = Math.max(VIEW.to - VIEW.from, 1), tg = topGroups(kind), k = tg.shown.length + 1;
  var cols = w, got = columns(kind, tg, cols), stacks = got.stacks, reservedAt = got.reserved;
  var top = 0, j, x;
  for (x = 0; x < cols; x++) {
    var sum = 0; for (j = 0; j < k; j++) sum += stacks[j][x];
    top = Math.max(top, sum, reservedAt[x]);
  }
  top = Math.max(top, 1);
  var y = function (v) { return 10 + h - v / top * h; };
  var base = new Float64Array(cols);
  for (j = 0; j < k; j++) {
    ctx.fillStyle = j < k - 1 ? PALETTE[j] : OTHER;
    for (x = 0; x < cols; x++) {
      var v = stacks[j][x]; if (v <= 0) continue;
      ctx.fillRect(left + x, y(base[x] + v), 1, v / top * h);
      base[x] += v;
    }
  }
  ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5; ctx.beginPath();
  for (x = 0; x < cols; x++) {
    if (x === 0) ctx.moveTo(left, y(reservedAt[0])); else ctx.lineTo(left + x, y(reservedAt[x]));
  }
  ctx.stroke();
  ctx.fillStyle = "#222"; ctx.font = "11px sans-serif";
  for (var q = 0; q <= 4; q++) {
    var val = top * q / 4;
    ctx.fillText(fmt(val), 2, y(val) + 4);
    ctx.fillStyle = "#eee"; ctx.fillRect(left, y(val), w, 1); ctx.fillStyle = "#222";
  }
  ctx.fillText("trace entry " + (DATA.offset + VIEW.from), left, H - 4);
  ctx.fillText(String(DATA.offset + VIEW.to), left + w - 60, H - 4);
  if (VIEW.from <= DATA.peak_entry && DATA.peak_entry < VIEW.to) {
    var px = left + (DATA.peak_entry - VIEW.from) * cols / n;
    ctx.fillStyle = "#c00"; ctx.fillRect(px, 10, 1, h);
    ctx.fillText("peak " + fmt(DATA.peak_bytes), Math.min(px + 4, W - 110), 22);
  }
  var legend = document.getElementById("legend"); legend.innerHTML = "";
  tg.shown.forEach(function (g, s) {
    var e = document.createElement("span");
    e.innerHTML = "<i style='background:" + PALETTE[s] + "'></i>";
    e.appendChild(document.createTextNode(DATA.names[kind][g]));
    legend.appendChild(e);
  });
  if (DATA.names[kind].length > tg.shown.length) {
    var o = document.createElement("span");
    o.innerHTML = "<i style='background:" + OTHER + "'></i>other";
    legend.appendChild(o);
  }
  var line = document.createElement("span");
  line.innerHTML = "<i style='background:#000;height:2px'></i>reserved";
  legend.appendChild(line);
  return tg;
}

function drawSegments(kind, tg, t) {
  var c = document.getElementById("segments"), ctx = c.getContext("2d");
  var W = c.width, H = c.height;
  ctx.clearRect(0, 0, W, H);
  var alive = DATA.ranges.filter(function (r) { return r.s <= t && t < r.e; });
  var total = alive.reduce(function (s, r) { return s + r.b; }, 0);
  var rows = Math.max(1, Math.min(alive.length, 12));
  var rowH = Math.floor((H - 10) / rows), used = 0;
  document.getElementById("momentText").textContent =
    "entry " + (DATA.offset + t) + ": " + alive.length + " reserved ranges, " + fmt(total);
  var live = DATA.lives.filter(function (l) { return l.s <= t && t < l.e; });
  alive.slice(0, rows).forEach(function (r, i) {
    var top = 5 + i * rowH, w = W - 130, scale = w / Math.max(r.b, 1);
    ctx.fillStyle = "#f3f3f3"; ctx.fillRect(120, top, w, rowH - 4);
    ctx.strokeStyle = "#bbb"; ctx.strokeRect(120, top, w, rowH - 4);
    live.forEach(function (l) {
      if (l.a < r.a || l.a >= r.a + r.b) return;
      var slot = tg.colour[l.g[kind]];
      ctx.fillStyle = slot < 0 ? OTHER : PALETTE[slot];
      ctx.fillRect(120 + (l.a - r.a) * scale, top, Math.max(1, l.b * scale), rowH - 4);
      used += l.b;
    });
    ctx.fillStyle = "#222"; ctx.font = "11px sans-serif";
    ctx.fillText(fmt(r.b), 4, top + rowH / 2 + 3);
  });
  if (alive.length > rows) {
    ctx.fillText("+" + (alive.length - rows) + " more ranges", 4, H - 4);
  }
  return used;
}

function holders() {
  var body = document.querySelector("#holders tbody");
  DATA.top_holders.forEach(function (h) {
    var tr = document.createElement("tr");
    [h[0], fmt(h[1]), String(h[2])].forEach(function (v, i) {
      var td = document.createElement("td"); td.textContent = v; if (i) td.className = "n";
      tr.appendChild(td);
    });
    body.appendChild(tr);
  });
}

function draw() {
  var kind = Number(document.getElementById("groupBy").value);
  var tg = drawTimeline(kind);
  var slider = document.getElementById("moment");
  drawSegments(kind, tg, Number(slider.value));
  return tg;
}

// Shows `data` (the whole trace, or a window of it the server sent) from `from` to `to`.
function show(data, from, to) {
  DATA = data;
  VIEW = { from: from, to: Math.max(to, from + 1) };
  document.getElementById("notes").innerHTML = "";
  DATA.notes.forEach(function (n) {
    var p = document.createElement("p"); p.className = "note"; p.textContent = n;
    document.getElementById("notes").appendChild(p);
  });
  document.getElementById("summary").textContent = DATA.entries + " trace entries, " +
    DATA.total_lives + " allocations, peak " + fmt(DATA.peak_bytes) + " at entry " +
    (DATA.offset + DATA.peak_entry);
  document.getElementById("view").textContent = (DATA.offset > 0 || data !== ROOT
    ? "window of entries " + DATA.offset + " to " + (DATA.offset + DATA.entries) + ". " : "") +
    (DATA.complete ? "every allocation drawn exactly" : "drawn from the summary");
  var slider = document.getElementById("moment");
  slider.min = String(VIEW.from);
  slider.max = String(Math.max(VIEW.to - 1, VIEW.from));
  var peakIn = VIEW.from <= DATA.peak_entry && DATA.peak_entry < VIEW.to;
  slider.value = String(peakIn ? DATA.peak_entry : VIEW.from);
  // Without every allocation, only the blocks live at the peak are known.
  slider.disabled = !DATA.complete;
  draw();
}

// Zooms into entries [a, b) of the data shown: exactly from the page's own data when it has
// every allocation, else from the server's window.
function zoom(a, b) {
  a = Math.max(0, Math.floor(a)); b = Math.min(DATA.entries, Math.ceil(b));
  if (b - a < 2) return;
  if (DATA.complete) { show(DATA, a, b); return; }
  if (location.protocol !== "http:") {
    document.getElementById("view").textContent = "zooming into the exact blocks needs " +
      "`strata viz --serve SNAPSHOT`: a page opened from a file cannot read the snapshot";
    return;
  }
  var from = DATA.offset + a, to = DATA.offset + b;
  document.getElementById("view").textContent = "reading entries " + from + " to " + to + "...";
  fetch("/window?from=" + from + "&to=" + to).then(function (r) {
    if (!r.ok) throw new Error("the server answered " + r.status);
    return r.json();
  }).then(function (d) { show(d, 0, d.entries); }).catch(function (e) {
    document.getElementById("view").textContent = "cannot read the window: " + e.message;
  });
}

var DATA = ROOT, VIEW = { from: 0, to: Math.max(ROOT.entries, 1) };

(function main() {
  var canvas = document.getElementById("timeline"), left = 70, w = canvas.width - 80, down = null;
  var entryAt = function (ev) {
    var r = canvas.getBoundingClientRect();
    var x = Math.min(Math.max(ev.clientX - r.left - left, 0), w);
    return VIEW.from + x * (VIEW.to - VIEW.from) / w;
  };
  canvas.addEventListener("mousedown", function (ev) { down = entryAt(ev); });
  canvas.addEventListener("mouseup", function (ev) {
    if (down === null) return;
    var up = entryAt(ev), a = Math.min(down, up), b = Math.max(down, up);
    down = null;
    if ((b - a) * w / (VIEW.to - VIEW.from) < 4) {
      var slider = document.getElementById("moment");
      if (!slider.disabled) { slider.value = String(Math.floor(a)); draw(); }
    } else {
      zoom(a, b);
    }
  });
  document.getElementById("whole").addEventListener("click", function () {
    show(ROOT, 0, ROOT.entries);
  });
  document.getElementById("groupBy").addEventListener("change", draw);
  document.getElementById("moment").addEventListener("input", draw);
  show(ROOT, 0, ROOT.entries);
  holders();
  var done = document.createElement("div");
  done.id = "drawn";
  done.textContent = "drawn " + DATA.total_lives + " allocations";
  document.body.appendChild(done);
})();
</script>
</body>
</html>
"##;
