/* neuraldbg report: draws the document embedded in the page as JSON (the script element of
 * type application/json, id "data"; written by neuraldbg_cli/publish/html.py, `format` 1).
 *
 * Every string in the document comes from a trace, which is data from elsewhere: it reaches
 * the page through textContent only (never innerHTML), and colours come from the registry's
 * states, never from trace text. Two kinds of chart, drawn by hand on canvases: the timeline
 * (state spans, a lane per layer and rank) and curves (a layer's summary numbers, a band per
 * number, transitions as vertical markers). Curves below the fold are drawn when they come
 * near the screen (IntersectionObserver), so a model of 500 layers opens as fast as one of 5.
 *
 * For tests and people alike: the root element gets data-ready="1" once everything is laid
 * out, and data-errors (a JSON list) when anything went wrong.
 */
"use strict";

(function () {
  var root = document.documentElement;
  var errors = [];

  function recordError(message) {
    errors.push(String(message).slice(0, 500));
    root.setAttribute("data-errors", JSON.stringify(errors));
  }
  window.addEventListener("error", function (e) { recordError(e.message || "error"); });
  window.addEventListener("unhandledrejection", function (e) {
    recordError("unhandled rejection: " + (e.reason && e.reason.message || e.reason));
  });
  var consoleError = console.error;
  console.error = function () {
    recordError(Array.prototype.join.call(arguments, " "));
    consoleError.apply(console, arguments);
  };

  var SHOWN = 5;            // origins shown open, as explain prints them; the rest fold away
  var EAGER = 4;            // curve cards drawn at once (the hypotheses' layers): no blank flash
  var LABEL_W = 180;        // the timeline's label column, in CSS pixels
  var CURVE_LABEL_W = 96;   // a curve band's label column
  var AXIS_H = 20;
  var FULL_LANES = 48;      // timeline lanes shown in full (16 pixels each, labelled)
  var RANK_COLORS = ["#1f3b73", "#e07b00", "#2b8a3e", "#8e44ad", "#c0392b", "#16a085",
                     "#7f8c8d", "#d35400"];
  var NONFINITE_COLOR = "#b5179e";
  var MISSING_COLOR = "#8c8c8c";    // a state this page's registry does not know

  var doc, tip;
  var redraws = [];         // what a window resize draws again

  // ---- small helpers ------------------------------------------------------------------------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      var kid = arguments[i];
      if (kid === null || kid === undefined) continue;
      parent.appendChild(typeof kid === "string" ? document.createTextNode(kid) : kid);
    }
    return parent;
  }

  var own = function (obj, key) { return Object.prototype.hasOwnProperty.call(obj, key); };

  // (a trace's state may be any string, "constructor" too: only the registry's own keys count)
  function stateOf(name) {
    return own(doc.states, name) ? doc.states[name]
      : {color: MISSING_COLOR, letter: "?", failure: false, ok: false, rank: 0};
  }

  function signalLabel(name) {
    return own(doc.signals, name) ? doc.signals[name].label : name;
  }

  function stateSpan(name) {
    var s = el("span", "state", name);
    s.style.color = stateOf(name).color;
    return s;
  }

  function fmt(v) {
    if (typeof v === "string") return v;
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e4 || a < 1e-3)) return v.toExponential(2);
    return String(Number(v.toPrecision(3)));
  }

  function statsText(stats) {
    var parts = [];
    for (var k in stats) {
      if (own(stats, k)) parts.push(k + " " + fmt(stats[k]));
    }
    return parts.join(", ");
  }

  function isNumber(v) { return typeof v === "number" && isFinite(v); }

  // A canvas sized in CSS pixels, drawn at the screen's resolution.
  function sizeCanvas(canvas, w, h, options) {
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    var ctx = canvas.getContext("2d", options);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  // Long layer names keep their end, which tells layers apart (as the terminal timeline does).
  function fitText(ctx, text, width) {
    if (ctx.measureText(text).width <= width) return text;
    var lo = 0, hi = text.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (ctx.measureText("\u2026" + text.slice(mid)).width <= width) hi = mid; else lo = mid + 1;
    }
    return "\u2026" + text.slice(lo);
  }

  // Step ticks at 1, 2 or 5 x 10^k, about one every 90 pixels.
  function ticks(last, width) {
    var want = Math.max(1, width / 90);
    var raw = Math.max(1, last / want);
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * p; })
      .find(function (s) { return s >= raw; });
    var out = [];
    for (var t = 0; t <= last; t += step) out.push(t);
    return out;
  }

  function drawAxis(ctx, x0, width, y, last) {
    ctx.fillStyle = "#555";
    ctx.strokeStyle = "#ccc";
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    ticks(last, width).forEach(function (t) {
      var x = Math.round(x0 + t / (last + 1) * width) + 0.5;
      var label = String(t);
      if (x + 2 + ctx.measureText(label).width > x0 + width) return;   // no label cut at the edge
      ctx.beginPath();
      ctx.moveTo(x, y - 4);
      ctx.lineTo(x, y + 4);
      ctx.stroke();
      ctx.fillText(label, x + 2, y);
    });
  }

  // ---- the tooltip ------------------------------------------------------------------------------
  function showTip(event, lines) {
    tip.textContent = "";
    lines.forEach(function (line, n) { add(tip, el("div", n === 0 ? "tip-head" : null, line)); });
    tip.hidden = false;
    var x = event.clientX + 14, y = event.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = Math.max(4, event.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, event.clientY - h - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  function hideTip() { tip.hidden = true; }

  // The summary numbers nearest before `step` in a lane's curve (binary search).
  function summaryAt(curve, step) {
    if (!curve) return null;
    var steps = curve.steps, lo = 0, hi = steps.length - 1;
    if (hi < 0 || steps[0] > step) return null;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (steps[mid] <= step) lo = mid; else hi = mid - 1;
    }
    var out = Object.create(null);
    for (var k in curve.stats) {
      var v = curve.stats[k][lo];
      if (v !== null && v !== undefined) out[k] = v;
    }
    return {step: steps[lo], stats: out};
  }

  // ---- header, warnings, hypotheses -------------------------------------------------------------
  function header(main) {
    add(main, el("h1", null, "neuraldbg report"));
    add(main, el("p", "run-line", doc.run_line));
    (doc.stop_lines || []).forEach(function (ev) {   // --stop-on and --capture: the file, linked
      var p = el("p", "evidence", ev.href ? null : ev.text);
      if (ev.href) {
        var a = el("a", null, ev.text);
        a.href = encodeURI(ev.href);
        add(p, a);
      }
      add(main, p);
    });
    if (doc.multi) {
      var ranks = el("p", "muted");
      add(ranks, doc.runs.map(function (r) { return "rank " + r.rank + ": " + r.path; }).join(" \u00b7 "));
      add(main, ranks);
    }
    if (doc.warnings.length) {
      var box = el("section", "warnings");
      box.id = "warnings";
      add(box, el("h2", null, "Warnings"));
      var ul = el("ul");
      doc.warnings.forEach(function (w) { add(ul, el("li", null, w)); });
      add(main, add(box, ul));
    }
  }

  function hypotheses(main) {
    var sec = el("section", "hypotheses verdict-" + doc.verdict);
    sec.id = "hypotheses";
    add(sec, el("h2", "verdict", doc.heading));
    var hs = doc.hypotheses;
    hs.slice(0, SHOWN).forEach(function (h) { add(sec, card(h)); });
    if (hs.length > SHOWN) {
      var more = el("details", "more");
      add(more, el("summary", null, (hs.length - SHOWN) + " more hypotheses, less likely"));
      hs.slice(SHOWN).forEach(function (h) { add(more, card(h)); });
      add(sec, more);
    }
    if (doc.more_hypotheses) {
      add(sec, el("p", "muted", "\u2026 and " + doc.more_hypotheses +
                  " more (see neuraldbg explain --json)"));
    }
    add(main, sec);
  }

  function headline(h, tag) {
    var head = el(tag, "headline");
    add(head, el("span", "pos", "#" + h.rank), " ", stateSpan(h.symptom),
        " " + h.signal + " in " + h.where + " at step " + h.step +
        (h.on_rank !== null ? " on rank " + h.on_rank : ""),
        " | cause ", el("span", "cause", h.cause), " | confidence " + h.confidence.toFixed(2));
    return head;
  }

  function card(h) {
    var art = el("article", "hypothesis");
    art.id = "hypothesis-" + h.rank;
    add(art, headline(h, "h3"), el("p", "summary", h.summary));
    var ul = el("ul", "evidence");
    h.evidence.forEach(function (e) { add(ul, el("li", null, e)); });
    add(art, ul);
    add(art, add(el("p", "fix"), el("span", "fix-label", "fix"), " ", el("span", null, h.fix)));
    if (h.alternatives.length) {
      add(art, el("p", "muted", "also consistent with: " + h.alternatives.join(", ")));
    }
    if (h.consequences.length) {
      var d = el("details", "consequences");
      add(d, el("summary", null, h.consequences.length + (h.more_consequences ? "+" : "") +
                " consequence" + (h.consequences.length > 1 ? "s" : "") + " of this failure"));
      h.consequences.forEach(function (c) {
        var item = el("div", "consequence");
        add(item, headline(c, "div"), el("p", "summary", c.summary));
        add(d, item);
      });
      if (h.more_consequences) add(d, el("p", "muted", "\u2026 and " + h.more_consequences + " more"));
      add(art, d);
    }
    var li = h.layer_index;
    if (li !== null && (li === doc.loss || doc.curve_order.indexOf(li) >= 0)) {
      var a = el("a", "to-curves", "curves of " + doc.layers[li].name + " \u2193");
      a.href = li === doc.loss ? "#loss" : "#curve-" + li;
      add(art, a);
    }
    return art;
  }

  // ---- the timeline -----------------------------------------------------------------------------
  function timelineRows() {
    var rows = [];
    doc.layers.forEach(function (layer, li) {
      layer.lanes.forEach(function (lane) {
        if (lane.spans.length) rows.push({layer: layer, index: li, lane: lane});
      });
    });
    return rows;
  }

  // Spans in drawing order: good health first, then problems by how a cell shows them, the
  // most prominent on top (as the terminal timeline picks the worst state of a column).
  function drawOrder(spans) {
    return spans.slice().sort(function (a, b) {
      var sa = stateOf(a[3]), sb = stateOf(b[3]);
      return (sa.ok ? -1 : sa.rank) - (sb.ok ? -1 : sb.rank);
    });
  }

  function timeline(main) {
    var all = timelineRows();
    var sec = el("section", "timeline");
    sec.id = "timeline";
    add(sec, el("h2", null, "Timeline"));
    if (!all.length) {
      add(main, add(sec, el("p", "muted", "No layer states in this trace.")));
      return;
    }
    // Past FULL_LANES lanes the lanes with problems are shown alone (500 healthy lanes of 3
    // pixels hide the one that died); a button shows them all.
    var troubled = all.filter(function (row) {
      return row.lane.spans.some(function (s) { return !stateOf(s[3]).ok; });
    });
    var folded = all.length > FULL_LANES && troubled.length > 0;
    var rows, laneH;
    var note = el("p", "muted");
    var toggle = el("button", "toggle");
    toggle.type = "button";
    toggle.hidden = !folded;
    function choose() {
      rows = folded ? troubled : all;
      laneH = rows.length <= FULL_LANES ? 16 : Math.max(2, Math.min(16, Math.floor(1600 / rows.length)));
      note.textContent = "steps 0\u2013" + doc.last_step + ", " +
        (folded ? rows.length + " of " + all.length + " lanes, those with problems" : rows.length + " lanes") +
        " (a lane per layer" + (doc.multi ? " and rank" : "") + "); hover for the numbers";
      toggle.textContent = folded ? "show all " + all.length + " lanes"
        : "show only the " + troubled.length + " lanes with problems";
    }
    choose();
    add(sec, add(el("div", "timeline-head"), note, toggle));
    var wrap = el("div", "canvas-wrap");
    var canvas = el("canvas", "timeline-canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "layer by step timeline of states");
    add(sec, add(wrap, canvas));
    add(sec, legend(all));
    add(main, sec);
    toggle.addEventListener("click", function () { folded = !folded; choose(); draw(); });

    var geo = {};
    function draw() {
      var width = Math.max(400, wrap.clientWidth);
      var plotW = width - LABEL_W;
      var height = AXIS_H + rows.length * laneH + 2;
      // (read back on every draw by count(): a canvas kept in memory, as the browser asks)
      var ctx = sizeCanvas(canvas, width, height, {willReadFrequently: true});
      geo = {plotW: plotW, laneH: laneH};
      canvas.setAttribute("data-lanes", String(rows.length));
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, width, height);
      drawAxis(ctx, LABEL_W, plotW, AXIS_H / 2, doc.last_step);
      var showLabels = laneH >= 10;
      ctx.font = Math.min(12, Math.max(1, laneH - 3)) + "px sans-serif";
      ctx.textBaseline = "middle";
      var x = function (step) { return LABEL_W + step / (doc.last_step + 1) * plotW; };
      rows.forEach(function (row, r) {
        var y = AXIS_H + r * laneH;
        var newLayer = r === 0 || rows[r - 1].index !== row.index;
        if (newLayer && r > 0 && doc.multi) {     // a rule between layers when lanes are ranks
          ctx.fillStyle = "#d0d4da";
          ctx.fillRect(0, y, width, 1);
        }
        if (showLabels) {
          ctx.fillStyle = "#222";
          var rank = doc.multi ? "r" + doc.runs[row.lane.run].rank + " " : "";
          var label = newLayer ? row.layer.name : "";
          ctx.fillText(rank + fitText(ctx, label, LABEL_W - 12 - ctx.measureText(rank).width),
                       4, y + laneH / 2);
        }
        drawOrder(row.lane.spans).forEach(function (s) {
          var st = stateOf(s[3]);
          var x0 = Math.floor(x(s[0]));
          var w = Math.max(1, Math.round(x(s[1])) - x0);   // a blip of one step stays visible
          ctx.fillStyle = st.color;
          ctx.fillRect(x0, y + 1, w, Math.max(1, laneH - (laneH >= 6 ? 2 : 1)));
          // its letter, as the terminal timeline shows it: states that share a colour (dead,
          // too_large) stay apart
          if (showLabels && !st.ok && w >= 12) {
            ctx.fillStyle = "#ffffff";
            ctx.fillText(st.letter, x0 + 3, y + laneH / 2);
          }
        });
      });
      count(canvas, ctx);
    }
    draw();
    redraws.push(draw);

    canvas.addEventListener("mousemove", function (e) {
      var box = canvas.getBoundingClientRect();
      var px = e.clientX - box.left, py = e.clientY - box.top;
      var r = Math.floor((py - AXIS_H) / geo.laneH);
      if (r < 0 || r >= rows.length || px < LABEL_W) { hideTip(); return; }
      var step = Math.floor((px - LABEL_W) / geo.plotW * (doc.last_step + 1));
      var perPx = (doc.last_step + 1) / geo.plotW;
      var row = rows[r];
      var lines = ["step " + step, "layer " + row.layer.name + (row.layer.type ? " (" + row.layer.type + ")" : "") +
                   (doc.multi ? ", rank " + doc.runs[row.lane.run].rank : "")];
      row.lane.spans.forEach(function (s) {
        // (a span narrower than a pixel is hit within a pixel of it)
        if (s[0] <= step + perPx && step < Math.max(s[1], s[0] + perPx)) {
          var text = signalLabel(s[2]) + ": " + s[3] + ", steps " + s[0] + "\u2013" + (s[1] - 1);
          var numbers = statsText(s[4]);
          lines.push(text + (numbers ? " (" + numbers + ")" : ""));
        }
      });
      for (var sig in row.lane.folded) {
        lines.push(sig + ": " + row.lane.folded[sig] + " later episodes folded into the last");
      }
      var sum = summaryAt(row.lane.curve, step);
      if (sum) lines.push("summary at step " + sum.step + ": " + statsText(sum.stats));
      showTip(e, lines);
    });
    canvas.addEventListener("mouseleave", hideTip);
  }

  // What was painted, for people who test the page: pixels not background in the plot area,
  // and those in a problem state's colour.
  function count(canvas, ctx) {
    var w = canvas.width, h = canvas.height;
    var dpr = window.devicePixelRatio || 1;
    var x0 = Math.round(LABEL_W * dpr), y0 = Math.round(AXIS_H * dpr);
    if (w <= x0 || h <= y0) return;
    var data = ctx.getImageData(x0, y0, w - x0, h - y0).data;
    var problems = [];
    for (var name in doc.states) {
      var st = doc.states[name];
      if (!st.ok) problems.push(parseInt(st.color.slice(1), 16));
    }
    var problemSet = Object.create(null);
    problems.forEach(function (c) { problemSet[c] = true; });
    var painted = 0, problem = 0;
    for (var i = 0; i < data.length; i += 4) {
      var r = data[i], g = data[i + 1], b = data[i + 2];
      if (r === 255 && g === 255 && b === 255) continue;
      painted++;
      if (problemSet[(r << 16) | (g << 8) | b]) problem++;
    }
    canvas.setAttribute("data-painted", String(painted));
    canvas.setAttribute("data-problem-pixels", String(problem));
  }

  function legend(rows) {
    var seen = Object.create(null);
    rows.forEach(function (row) { row.lane.spans.forEach(function (s) { seen[s[3]] = true; }); });
    var names = Object.keys(seen).sort(function (a, b) {
      var sa = stateOf(a), sb = stateOf(b);
      return (sb.ok ? -1 : sb.rank) - (sa.ok ? -1 : sa.rank);
    });
    var box = el("p", "legend");
    names.forEach(function (name) {
      var st = stateOf(name);
      var sw = el("span", "swatch", st.ok ? "" : st.letter);
      sw.style.background = st.color;
      add(box, add(el("span", "legend-item"), sw, name));
    });
    add(box, add(el("span", "legend-item"), el("span", "swatch blank"), "not yet seen"));
    return box;
  }

  // ---- curves -----------------------------------------------------------------------------------
  // The numbers of a layer, one band per number (rms, inactive, grad_norm, ...), each on its
  // own scale (log when positive over more than a factor 50: gradient norms span decades), one
  // line per rank; a vertical marker at each transition, in the colour of the state entered.
  function keysOf(layer) {
    var keys = [];
    layer.lanes.forEach(function (lane) {
      if (!lane.curve) return;
      Object.keys(lane.curve.stats).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); });
    });
    return keys;
  }

  function scaleOf(layer, key) {
    var lo = Infinity, hi = -Infinity;
    layer.lanes.forEach(function (lane) {
      var vs = lane.curve && lane.curve.stats[key];
      if (!vs) return;
      for (var i = 0; i < vs.length; i++) {
        if (isNumber(vs[i])) { lo = Math.min(lo, vs[i]); hi = Math.max(hi, vs[i]); }
      }
    });
    if (lo === Infinity) return null;
    var log = lo > 0 && hi / lo > 50;
    var f = log ? Math.log10 : function (v) { return v; };
    var a = f(lo), b = f(hi);
    if (a === b) { a -= log ? 1 : (Math.abs(a) || 1) * 0.1; b += log ? 1 : (Math.abs(b) || 1) * 0.1; }
    return {lo: lo, hi: hi, log: log, y: function (v, top, h) {
      return top + h - (f(v) - a) / (b - a) * h;
    }};
  }

  // Transitions worth marking: every change of state, and a first observation in a problem
  // state (the healthy first one is when a layer was first seen, not a change).
  function marks(lane) {
    var seen = Object.create(null);
    return lane.spans.filter(function (s) {
      var first = !seen[s[2]];
      seen[s[2]] = true;
      return !first || !stateOf(s[3]).ok;
    });
  }

  function drawCurve(layer, holder, bandH) {
    var keys = keysOf(layer);
    var width = Math.max(400, holder.clientWidth);
    var plotW = width - CURVE_LABEL_W;
    var gap = 8;
    var height = keys.length * (bandH + gap) + AXIS_H;
    holder.textContent = "";
    var canvas = el("canvas", "curve-canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "summary numbers of " + layer.name);
    add(holder, canvas);
    var ctx = sizeCanvas(canvas, width, height);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, width, height);
    var last = doc.last_step;
    var x = function (step) { return CURVE_LABEL_W + step / (last + 1) * plotW; };
    var bands = keys.map(function (key, n) {
      return {key: key, top: n * (bandH + gap) + 4, scale: scaleOf(layer, key)};
    });
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    bands.forEach(function (band) {
      ctx.fillStyle = "#f6f7f9";
      ctx.fillRect(CURVE_LABEL_W, band.top, plotW, bandH);
      ctx.fillStyle = "#222";
      ctx.fillText(fitText(ctx, band.key, CURVE_LABEL_W - 8), 4, band.top + 10);
      if (band.scale) {
        ctx.fillStyle = "#777";
        ctx.fillText(fmt(band.scale.hi), 4, band.top + 24);
        ctx.fillText(fmt(band.scale.lo) + (band.scale.log ? " (log)" : ""), 4, band.top + bandH - 6);
      }
    });
    // markers under the lines
    layer.lanes.forEach(function (lane) {
      marks(lane).forEach(function (s) {
        var mx = Math.round(x(s[0])) + 0.5;
        ctx.strokeStyle = stateOf(s[3]).color;
        ctx.lineWidth = 1.5;
        ctx.beginPath();
        ctx.moveTo(mx, 2);
        ctx.lineTo(mx, height - AXIS_H);
        ctx.stroke();
      });
    });
    ctx.lineWidth = 1.25;
    layer.lanes.forEach(function (lane) {
      if (!lane.curve) return;
      var steps = lane.curve.steps;
      var color = RANK_COLORS[lane.run % RANK_COLORS.length];
      bands.forEach(function (band) {
        var vs = lane.curve.stats[band.key];
        if (!vs) return;
        ctx.strokeStyle = color;
        ctx.beginPath();
        var open = false;
        for (var i = 0; i < vs.length; i++) {
          var v = vs[i];
          if (isNumber(v) && band.scale) {
            var px = x(steps[i]), py = band.scale.y(v, band.top + 3, bandH - 6);
            if (open) ctx.lineTo(px, py); else ctx.moveTo(px, py);
            open = true;
          } else {
            open = false;       // a gap: missing, or NaN/inf (ticked below)
            if (typeof v === "string") {
              ctx.fillStyle = NONFINITE_COLOR;
              ctx.fillRect(Math.round(x(steps[i])) - 1, band.top, 3, 6);
            }
          }
        }
        ctx.stroke();
      });
    });
    drawAxis(ctx, CURVE_LABEL_W, plotW, height - AXIS_H / 2, last);
    holder.setAttribute("data-drawn", "1");

    canvas.addEventListener("mousemove", function (e) {
      var box = canvas.getBoundingClientRect();
      var px = e.clientX - box.left;
      if (px < CURVE_LABEL_W) { hideTip(); return; }
      var step = Math.round((px - CURVE_LABEL_W) / plotW * (last + 1));
      var lines = [layer.name + " near step " + step];
      layer.lanes.forEach(function (lane) {
        var sum = summaryAt(lane.curve, step);
        if (sum) {
          lines.push((doc.multi ? "rank " + doc.runs[lane.run].rank + ", " : "") + "step " + sum.step +
                     ": " + statsText(sum.stats));
        }
      });
      showTip(e, lines);
    });
    canvas.addEventListener("mouseleave", hideTip);
  }

  function markList(layer) {
    var items = [];
    layer.lanes.forEach(function (lane) {
      marks(lane).forEach(function (s) {
        items.push({step: s[0], state: s[3], signal: s[2],
                    rank: doc.multi ? doc.runs[lane.run].rank : null});
      });
    });
    items.sort(function (a, b) { return a.step - b.step; });
    var p = el("p", "marks");
    if (!items.length) return null;
    add(p, "transitions: ");
    items.slice(0, 12).forEach(function (m, n) {
      add(p, n ? ", " : "", "step " + m.step + " ", stateSpan(m.state),
          " (" + m.signal + (m.rank !== null ? ", rank " + m.rank : "") + ")");
    });
    if (items.length > 12) add(p, ", \u2026 " + (items.length - 12) + " more");
    return p;
  }

  function curveCard(li, bandH) {
    var layer = doc.layers[li];
    var art = el("article", "curve");
    art.id = "curve-" + li;
    var head = el("h3", null, layer.name + (layer.type ? " (" + layer.type + ")" : ""));
    layer.failed.forEach(function (s) { add(head, " ", add(el("span", "badge"), stateSpan(s))); });
    doc.hypotheses.forEach(function (h) {
      if (h.layer_index !== li) return;
      var ref = el("a", "badge-ref", "#" + h.rank);
      ref.href = "#hypothesis-" + h.rank;
      add(head, " ", ref);
    });
    var holder = el("div", "plot");
    holder.style.height = (keysOf(layer).length * (bandH + 8) + AXIS_H) + "px";
    add(art, head, holder, markList(layer));
    var draw = function () { drawCurve(layer, holder, bandH); };
    return {card: art, holder: holder, draw: draw};
  }

  // Which line is which rank, for the curves of a distributed run.
  function rankLegend() {
    if (!doc.multi) return null;
    var box = el("p", "legend");
    doc.runs.forEach(function (r, n) {
      var sw = el("span", "swatch line");
      sw.style.background = RANK_COLORS[n % RANK_COLORS.length];
      add(box, add(el("span", "legend-item"), sw, "rank " + r.rank));
    });
    return box;
  }

  function lossChart(main) {
    if (doc.loss === null) return;
    var sec = el("section", "loss");
    sec.id = "loss";
    add(sec, el("h2", null, "Loss"), rankLegend());
    var c = curveCard(doc.loss, 140);
    add(main, add(sec, c.card));
    c.draw();
    redraws.push(c.draw);
  }

  function curves(main) {
    var sec = el("section", "curves");
    sec.id = "curves";
    add(sec, el("h2", null, "Layers"));
    var without = doc.layers.length - doc.curve_order.length - (doc.loss !== null ? 1 : 0);
    add(sec, el("p", "muted", "Summary numbers per layer, the hypotheses' layers first, then those " +
                "that failed, then the rest" + (without > 0 ? "; " + without +
                " layers have no summaries" : "") + "."));
    if (!doc.curve_order.length) add(sec, el("p", "muted", "No summaries in this trace."));
    else add(sec, rankLegend());
    add(main, sec);
    var cards = doc.curve_order.map(function (li) { return curveCard(li, 56); });
    cards.forEach(function (c) { add(sec, c.card); });
    var lazy = [];
    cards.forEach(function (c, n) {
      var drawn = false;
      c.redraw = function () { if (drawn) c.draw(); };
      c.first = function () { if (!drawn) { drawn = true; c.draw(); } };
      if (n < EAGER || !("IntersectionObserver" in window)) c.first(); else lazy.push(c);
      redraws.push(c.redraw);
    });
    if (lazy.length) {
      var io = new IntersectionObserver(function (entries) {
        entries.forEach(function (entry) {
          if (!entry.isIntersecting) return;
          io.unobserve(entry.target);
          entry.target.__draw();
        });
      }, {rootMargin: "400px 0px"});
      lazy.forEach(function (c) { c.holder.__draw = c.first; io.observe(c.holder); });
    }
  }

  // ---- the page ---------------------------------------------------------------------------------
  function run() {
    doc = JSON.parse(document.getElementById("data").textContent);
    if (doc.format !== 1) throw new Error("report format " + doc.format + " is not one this page draws");
    doc.layers.forEach(function (layer) {
      layer.lanes.forEach(function (lane) {
        if (lane.curve) lane.curve.steps = doc.step_sets[lane.curve.steps];
      });
    });
    document.title = "neuraldbg: " + doc.title;
    tip = el("div", "tip");
    tip.hidden = true;
    document.body.appendChild(tip);
    var main = document.getElementById("report");
    header(main);
    hypotheses(main);
    timeline(main);
    lossChart(main);
    curves(main);
    add(main, el("footer", "muted", "neuraldbg " + doc.version + " \u00b7 neuraldbg report"));
    var pending = null;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(function () { redraws.forEach(function (f) { f(); }); }, 150);
    });
  }

  try {
    run();
    root.setAttribute("data-ready", "1");
  } catch (e) {
    recordError(e && e.stack || e);
    var box = document.getElementById("report") || document.body;
    box.appendChild(el("p", "fatal", "This report could not be drawn: " + (e && e.message || e)));
  }
})();
