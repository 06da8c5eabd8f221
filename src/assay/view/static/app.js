// assay view: the page of one run. Plain DOM, no library, no build step.
// Safety rule: text from the run (prompts, completions, reasons, ids) is only ever set with
// textContent or as an attribute value we name; never innerHTML, never a URL from the data.
"use strict";

(function () {
  const DATA = {};          // name -> object, filled by the data files (assayData calls)
  const WAITING = {};       // name -> [resolve]
  const PAGE = 100;         // task lines per page of the samples table
  const FLAGS = {failed: 1, truncated: 2, gen_error: 4, unjudged: 8, guard: 16, passed: 32};
  let META = null;

  window.assayData = function (name, obj) {
    DATA[name] = obj;
    (WAITING[name] || []).forEach((f) => f(obj));
    delete WAITING[name];
    if (name === "meta") { META = obj; start(); }
  };

  // Load one data file by <script> (works from file://, where fetch does not).
  function load(name, file) {
    if (DATA[name]) return Promise.resolve(DATA[name]);
    return new Promise((resolve, reject) => {
      (WAITING[name] = WAITING[name] || []).push(resolve);
      if (document.querySelector('script[data-file="' + file + '"]')) return;
      const s = document.createElement("script");
      s.src = "data/" + file;
      s.dataset.file = file;
      s.onerror = () => reject(new Error("cannot load data/" + file));
      document.body.appendChild(s);
    });
  }

  // ---------------------------------------------------------------- small DOM helpers
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
      else e.setAttribute(k, v);
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined || k === false) continue;
      e.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
  const pct = (x) => (x === null || x === undefined ? "-" : (100 * x).toFixed(1) + "%");
  const ci = (e) => (e.low === null || e.low === undefined ? "" : "[" + fmt(e.low) + ", " + fmt(e.high) + "]");
  function table(head, rows, cls) {
    return el("table", {class: cls || "grid"},
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c))))));
  }
  function section(title, ...kids) { return el("section", {class: "card"}, el("h2", {}, title), ...kids); }
  function help(text) { return el("p", {class: "help"}, text); }
  // task ids in natural order: HumanEval/2 before HumanEval/10
  const natural = (s) => s.replace(/\d+/g, (d) => d.padStart(16, "0"));
  const cmpStr = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  function route() { return decodeURIComponent(location.hash.replace(/^#/, "")).split("/"); }
  function go(...parts) { location.hash = "#" + parts.map(encodeURIComponent).join("/"); }

  // ---------------------------------------------------------------- start
  function start() {
    const rep = META.report, study = rep.study || {};
    if (!META.run) {  // a plain run: its folder, from this page's address (RUN/view/index.html)
      const parts = decodeURIComponent(location.pathname).split("/");
      META.run = parts.length > 3 ? parts[parts.length - 3] : "this run";
    }
    document.title = "assay view: " + (study.name || META.run);
    const head = document.getElementById("study");
    head.textContent = "";
    head.append(el("b", {}, study.name || "?"), " run ", el("code", {}, META.run));
    const tabs = document.getElementById("tabs");
    tabs.textContent = "";
    const items = [["overview", "Overview"], ["samples", "Samples"]];
    if (META.against || META.nightly) items.push(["changes", "What changed"]);
    for (const [id, label] of items) tabs.append(el("a", {href: "#" + id, id: "tab-" + id}, label));
    window.addEventListener("hashchange", render);
    render();
  }

  function render() {
    const [page, ...rest] = route();
    const main = document.getElementById("main");
    main.textContent = "";
    document.querySelectorAll("#tabs a").forEach((a) => a.classList.remove("on"));
    const tab = page === "task" ? "samples" : page === "pair" ? "changes" : page || "overview";
    const t = document.getElementById("tab-" + tab);
    if (t) t.classList.add("on");
    const views = {overview, samples, task: taskPage, changes, pair: pairPage};
    (views[page] || overview)(main, rest);
    window.scrollTo(0, 0);
  }

  // ---------------------------------------------------------------- overview
  function verdictBanner(n) {
    const bad = n.verdict === "regression" || n.verdict === "partial";
    const cls = bad ? "bad" : n.verdict === "pass" ? "good" : "neutral";
    const text = n.verdict === "regression" ? "REGRESSION: a gated metric got worse tonight"
      : n.verdict === "partial" ? "PARTIAL night: the model gave no completion for some samples; not a pass"
      : n.verdict === "pass" ? "Gate passed: no gated metric got worse than its baseline"
      : "No baseline yet: nothing to compare tonight with";
    const partial = n.partial || [];
    return el("div", {class: "banner " + cls, id: "gate-verdict"},
      el("b", {}, "Nightly " + (n.night || "") + ": "), text,
      n.regressions.length ? el("ul", {}, n.regressions.map((r) => el("li", {},
        r.source + " / " + r.metric + ": delta " + fmt(r.delta) + " [" + fmt(r.low) + ", " + fmt(r.high) +
        "] vs " + r.baseline + " (Holm p " + fmt(r.p_adjusted, 4) + ")"))) : null,
      partial.length ? el("ul", {class: "partial"}, partial.map((t) => el("li", {}, t))) : null);
  }

  function overview(main) {
    const rep = META.report, study = rep.study || {};
    main.append(el("div", {class: "intro"},
      el("h1", {}, "Study " + (study.name || "")),
      study.description ? el("p", {}, study.description) : null,
      help("This page shows one run of an assay study. Overview: the numbers of the report " +
        "(report.json, with 95% intervals; n counts tasks). Samples: every task with its k " +
        "completions, verdicts and reward scores. " +
        (META.against || META.nightly ? "What changed: the tasks that moved against " +
          (META.against ? "run " + META.against.run : "the baseline") + "." : "")),
      el("p", {class: "muted"}, "spec checksum ", el("code", {}, study.checksum || "-"))));
    if (META.nightly) main.append(verdictBanner(META.nightly));
    const heads = {}, headWarns = {};
    for (const m of rep.measurements || []) {
      if (m.kind === "not_measured") headWarns[m.source] = [m.text];
      if (m.kind !== "pass_at") continue;
      const e = (m.estimates || []).find((x) => String(x.name).startsWith("pass@1"));
      if (e) { heads[m.source || m.label] = e; headWarns[m.source || m.label] = warningsOf(m); }
    }
    if ((rep.sources || []).length) {
      main.append(section("Sources",
        help("One line per source: how many tasks and rows (k samples per task) it has, what " +
          "graded it, and its pass@1 as the report states it."),
        table(["source", "tasks", "rows", "graded by", "pass@1", "95% CI", "n", "stopped by a guard"],
          rep.sources.map((s) => {
            const e = heads[s.name] || {};
            const g = s.guard_stopped || {};
            const nGuard = Object.values(g).reduce((a, b) => a + b, 0);
            return [el("a", {href: "#samples/" + (srcIndex(s.name) ?? "")}, s.name), s.tasks, s.rows,
              s.verifier, el("span", {}, fmt(e.value), warnMark(headWarns[s.name])), ci(e), e.n ?? "-",
              nGuard ? nGuard + " (" + Object.entries(g).map(([k, v]) => k + ": " + v).join(", ") +
              ")" : "0"];
          }), "grid sources"),
        warnList(rep.sources.filter((s) => s.unjudged && s.unjudged.rows).map((s) =>
          s.name + ": " + s.unjudged.rows + " of " + s.rows + " rows unjudged (no reward; left " +
          "out of the measurements); top reasons: " +
          s.unjudged.reasons.map(([why, n]) => why + " (" + n + ")").join("; ")))));
    }
    const gen = (rep.sources || []).filter((s) => s.generation);
    if (gen.length) {
      const kids = [help("Completions sampled by assay: a 'length' finish is a truncated completion; " +
        "failed requests are never graded.")];
      if (gen.length) kids.push(table(["source", "model", "k", "completions", "failed", "truncated",
        "prompt tokens (mean)", "completion tokens (mean)"], gen.map((s) => {
        const g = s.generation;
        return [s.name, g.model, g.k, g.completions, g.errors, pct(g.truncated_share),
          g.prompt_tokens_mean, g.completion_tokens_mean];
      })));
      main.append(section("Generation", ...kids));
    }
    const ms = rep.measurements || [];
    if (ms.length) {
      const kids = [help("Every measurement of the report, with the estimates and their 95% intervals. " +
        "Open a measurement for the report's full text.")];
      for (const m of ms) {
        const ests = m.estimates || [];
        kids.push(el("h3", {}, m.label));
        kids.push(warnList(warningsOf(m)));  // beside the numbers they qualify, never only in the text
        if (ests.length) kids.push(table(["estimate", "value", "95% CI", "n", "unit", "note"],
          ests.map((e) => [estName(m, e), fmt(e.value), ci(e), e.n ?? "-", e.unit || "", e.note || ""])));
        if (m.kind === "pass_at_by" && (m.categories || []).length) {
          kids.push(el("p", {class: "muted"}, "pass@1 per " + m.by + ":"));
          kids.push(table([m.by, "pass@1", "95% CI", "n tasks"],
            [...m.categories, m.macro || {}].filter((c) => c.category !== undefined).map((c) =>
              [c.category, fmt(c.value), ci(c), c.n ?? "-"])));
        }
        if (m.report) kids.push(el("details", {}, el("summary", {}, "report text"), el("pre", {}, m.report)));
      }
      main.append(section("Measurements", ...kids));
    }
    for (const [key, title] of [["contamination", "Contamination"], ["reward_audits", "Reward-model audits"]]) {
      const docs = rep[key] || [];
      if (!docs.length) continue;
      main.append(section(title, ...docs.map((c) => el("div", {}, el("h3", {}, c.label),
        warnList(warningsOf(c)), table(["estimate", "value", "95% CI", "n"], (c.estimates || []).map((e) =>
          [e.name, fmt(e.value), ci(e), e.n ?? "-"])),
        c.report ? el("details", {}, el("summary", {}, "report text"), el("pre", {}, c.report)) : null))));
    }
    if (META.plots.length) {
      main.append(section("Plots", el("div", {class: "plots"}, META.plots.map((p) =>
        el("figure", {}, el("img", {src: "plots/" + p, alt: p}), el("figcaption", {}, p))))));
    }
  }

  // The warnings of a measurement: every "warning:" line of its report text (report.md shows
  // that text, so the page shows every warning report.md does), or why it was not measured.
  function warningsOf(m) {
    if (m.kind === "not_measured") return [m.text];
    return String(m.report || "").split("\n").map((l) => /^\s*warning:\s*(.*)$/.exec(l))
      .filter((x) => x && x[1]).map((x) => x[1]);
  }

  function warnList(ws) {
    return ws && ws.length ? el("ul", {class: "warnings"}, ...ws.map((w) => el("li", {}, w))) : null;
  }

  // A mark beside a number that carries warnings: the warnings are its title (hover).
  function warnMark(ws) {
    return ws && ws.length ? el("span", {class: "warn-mark", title: ws.join("\n")},
      " \u26a0 " + ws.length + " warning" + (ws.length > 1 ? "s" : "")) : null;
  }

  // An estimate of a per-category result is named with its category ("algebra: pass@1").
  function estName(m, e) {
    const hit = /^categories\[(\d+)\]/.exec(e.path || "");
    const cats = (m.data && m.data.categories) || [];
    const c = hit && cats[Number(hit[1])];
    return c && c.category !== undefined ? c.category + ": " + e.name : e.name;
  }

  function srcIndex(name) {
    const s = META.sources.find((x) => x.name === name);
    return s ? s.index : undefined;
  }

  // ---------------------------------------------------------------- samples
  const STATE = {};   // per source: filters, sort, page
  function state(i) {
    return STATE[i] = STATE[i] || {status: "all", flags: {}, category: "", metric: "pass_rate",
      lo: "", hi: "", q: "", sort: "id", page: 0};
  }

  function sourceTabs(main, cur, prefix) {
    if (META.sources.length < 2) return;
    main.append(el("div", {class: "subtabs"}, META.sources.map((s) =>
      el("a", {href: "#" + prefix + "/" + s.index, class: s.index === cur ? "on" : ""}, s.name))));
  }

  async function tasksOf(src) {
    const t = await load("tasks:" + src.index, src.tasks_file);
    if (!t.objs) {
      const cols = t.columns;
      t.objs = t.lines.map((l) => { const o = {}; cols.forEach((c, j) => { o[c] = l[j]; }); return o; });
      // natural order of ids, computed once: a redraw compares ranks, not strings
      const keys = new Map(t.objs.map((o) => [o, natural(o.id)]));
      t.objs.slice().sort((a, b) => cmpStr(keys.get(a), keys.get(b))).forEach((o, r) => { o.rank = r; });
    }
    return t.objs;
  }

  // The searchable text of each task (prompt and every completion), built from all chunks.
  async function haystacks(src, progress) {
    const key = "hay:" + src.index;
    if (DATA[key]) return DATA[key];
    const hay = {};
    let done = 0;
    await Promise.all(src.chunks.map((f, j) => load("rows:" + src.index + ":" + j, f).then((chunk) => {
      for (const t of chunk) {
        hay[t.id] = (t.messages.map((m) => m.content || "").join("\n") + "\n" +
          t.rows.map((r) => r.text || "").join("\n")).toLowerCase();
      }
      progress(++done, src.chunks.length);
    })));
    return DATA[key] = hay;
  }

  function metricValue(t, metric, src) {
    if (metric === "pass_rate") return t.pass_rate;
    if (metric === "mean_reward") return t.mean_reward;
    if (metric === "length") return t.length;
    const j = src.rm.indexOf(metric.replace(/^rm:/, ""));
    return j < 0 ? null : t.rm[j];
  }

  async function samples(main, rest) {
    if (!META.sources.length) { main.append(section("Samples", help("This run has no graded rows."))); return; }
    const i = rest[0] !== undefined && rest[0] !== "" ? Number(rest[0]) : META.sources[0].index;
    const src = META.sources.find((s) => s.index === i) || META.sources[0];
    sourceTabs(main, src.index, "samples");
    const st = state(src.index);
    const box = el("section", {class: "card"});
    main.append(box);
    box.append(el("h2", {}, "Samples of " + src.name),
      help("One line per task: how many of its samples passed (binary rewards only), the mean reward" +
        (src.rm.length ? ", the mean reward-model score per model" : "") +
        " and the mean completion length in characters. Click a task to read its prompt and every completion."));
    const tasks = await tasksOf(src);
    const cats = [...new Set(tasks.map((t) => t.category).filter((c) => c !== null))].sort();
    const metrics = [["pass_rate", "pass rate"], ["mean_reward", "mean reward"], ["length", "length"],
      ...src.rm.map((m) => ["rm:" + m, "rm score " + m])];
    const count = el("span", {id: "count", class: "count"});
    const status = el("span", {id: "search-status", class: "muted"});
    const list = el("div", {id: "task-list"});
    const pager = el("div", {class: "pager"});
    const ctl = (tag, attrs, ...k) => { const e = el(tag, attrs, ...k); e.addEventListener("change", apply); return e; };
    const statusSel = ctl("select", {id: "f-status"},
      [["all", "all tasks"], ["failed", "some sample failed"], ["nonepass", "no sample passed"],
        ["passed", "every sample passed"]].map(([v, l]) => el("option", {value: v}, l)));
    statusSel.value = st.status;
    const flagBoxes = [["truncated", "truncated"], ["gen_error", "generation error"], ["unjudged", "unjudged"],
      ["guard", "stopped by a grading guard"]].map(([f, l]) => {
      const c = ctl("input", {type: "checkbox", id: "f-" + f});
      c.checked = !!st.flags[f];
      return el("label", {class: "chk"}, c, " " + l);
    });
    const catSel = ctl("select", {id: "f-category"}, el("option", {value: ""}, "every " + (src.by || "category")),
      cats.map((c) => el("option", {value: c}, c)));
    catSel.value = st.category;
    catSel.disabled = !cats.length;
    const metSel = ctl("select", {id: "f-metric"}, metrics.map(([v, l]) => el("option", {value: v}, l)));
    metSel.value = st.metric;
    const lo = ctl("input", {type: "number", step: "any", id: "f-lo", placeholder: "min", class: "num"});
    const hi = ctl("input", {type: "number", step: "any", id: "f-hi", placeholder: "max", class: "num"});
    lo.value = st.lo; hi.value = st.hi;
    const sortSel = ctl("select", {id: "f-sort"}, [["id", "task id"], ["pass_asc", "pass rate, lowest first"],
      ["pass_desc", "pass rate, highest first"], ["reward_asc", "mean reward, lowest first"],
      ...src.rm.map((m) => ["rm_asc:" + m, "rm " + m + ", lowest first"]),
      ...src.rm.map((m) => ["rm_desc:" + m, "rm " + m + ", highest first"]),
      ["len_desc", "longest completions first"], ["len_asc", "shortest completions first"]].map(([v, l]) =>
      el("option", {value: v}, l)));
    sortSel.value = st.sort;
    const q = el("input", {type: "search", id: "f-q", placeholder: "search prompts and completions", value: st.q});
    let timer = null;
    q.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(apply, 250); });
    box.append(el("div", {class: "filters"},
      el("label", {}, "show ", statusSel), ...flagBoxes,
      el("label", {}, cats.length ? "" : "", catSel),
      el("label", {}, "range of ", metSel, " ", lo, " to ", hi),
      el("label", {}, "sort ", sortSel), q, status), count, list, pager);

    let shown = [];
    async function apply() {
      st.status = statusSel.value; st.category = catSel.value; st.metric = metSel.value;
      st.lo = lo.value; st.hi = hi.value; st.sort = sortSel.value; st.q = q.value;
      for (const [f] of [["truncated"], ["gen_error"], ["unjudged"], ["guard"]])
        st.flags[f] = document.getElementById("f-" + f).checked;
      let out = tasks.filter((t) => {
        if (st.status === "failed" && !(t.flags & FLAGS.failed)) return false;
        if (st.status === "passed" && !(t.flags & FLAGS.passed)) return false;
        if (st.status === "nonepass" && !(t.n_binary > 0 && t.n_pass === 0)) return false;
        for (const [f, on] of Object.entries(st.flags)) if (on && !(t.flags & FLAGS[f])) return false;
        if (st.category && t.category !== st.category) return false;
        if (st.lo !== "" || st.hi !== "") {
          const v = metricValue(t, st.metric, src);
          if (v === null || v === undefined) return false;
          if (st.lo !== "" && v < Number(st.lo)) return false;
          if (st.hi !== "" && v > Number(st.hi)) return false;
        }
        return true;
      });
      const needle = st.q.trim().toLowerCase();
      if (needle) {
        const quick = out.filter((t) => t.id.toLowerCase().includes(needle) || t.preview.toLowerCase().includes(needle));
        status.textContent = "searching completions...";
        const hay = await haystacks(src, (d, n) => { status.textContent = "searching: " + d + " of " + n + " data files"; });
        if (st.q.trim().toLowerCase() !== needle) return;   // a newer search took over
        const ids = new Set(quick.map((t) => t.id));
        out = out.filter((t) => ids.has(t.id) || (hay[t.id] || "").includes(needle));
        status.textContent = "";
      } else status.textContent = "";
      const key = (t) => metricValue(t, st.sort.replace(/^rm_(asc|desc):/, "rm:"), src);
      const num = (v, dflt) => (v === null || v === undefined ? dflt : v);
      const cmp = {
        id: (a, b) => a.rank - b.rank,
        pass_asc: (a, b) => num(a.pass_rate, 2) - num(b.pass_rate, 2),
        pass_desc: (a, b) => num(b.pass_rate, -1) - num(a.pass_rate, -1),
        reward_asc: (a, b) => num(a.mean_reward, Infinity) - num(b.mean_reward, Infinity),
        len_desc: (a, b) => b.length - a.length,
        len_asc: (a, b) => a.length - b.length,
      };
      let f = cmp[st.sort];
      if (!f && st.sort.startsWith("rm_asc:")) f = (a, b) => num(key(a), Infinity) - num(key(b), Infinity);
      if (!f && st.sort.startsWith("rm_desc:")) f = (a, b) => num(key(b), -Infinity) - num(key(a), -Infinity);
      shown = out.slice().sort((a, b) => f(a, b) || a.rank - b.rank);
      st.page = Math.min(st.page, Math.max(0, Math.ceil(shown.length / PAGE) - 1));
      draw();
      // for tests and scripts: how many times the list was redrawn after a filter change
      document.body.dataset.applied = String(Number(document.body.dataset.applied || 0) + 1);
      if (!document.body.dataset.firstDraw) document.body.dataset.firstDraw = String(performance.now());
    }

    function draw() {
      count.textContent = "";
      count.append(el("b", {id: "n-shown"}, String(shown.length)), " of ",
        el("b", {id: "n-tasks"}, String(tasks.length)), " tasks (" + src.n_rows + " rows)");
      list.textContent = "";
      const page = shown.slice(st.page * PAGE, (st.page + 1) * PAGE);
      const head = ["task", src.by || "category", "passed", "pass rate", "mean reward",
        ...src.rm.map((m) => "rm " + m), "length", "flags", "prompt"];
      const rows = page.map((t) => {
        const flags = Object.keys(FLAGS).filter((f) => f !== "failed" && f !== "passed" && (t.flags & FLAGS[f]));
        const bar = el("span", {class: "bar"}, el("span", {class: "fill"}));
        if (t.pass_rate !== null) bar.firstChild.style.width = (100 * t.pass_rate).toFixed(0) + "%";
        const tr = el("tr", {class: "task-row", data: {task: t.id},
          on: {click: () => go("task", String(src.index), t.id)}},
          el("td", {class: "id"}, t.id), el("td", {}, t.category ?? ""),
          el("td", {}, t.n_binary ? t.n_pass + "/" + t.n_binary : "-"),
          el("td", {}, bar, " ", fmt(t.pass_rate, 2)), el("td", {}, fmt(t.mean_reward)),
          ...t.rm.map((v) => el("td", {}, fmt(v))),
          el("td", {}, Math.round(t.length)),
          el("td", {}, flags.map((f) => el("span", {class: "flag " + f}, f.replace("_", " ")))),
          el("td", {class: "preview"}, t.preview));
        return tr;
      });
      list.append(el("table", {class: "grid tasks"}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
      pager.textContent = "";
      const pages = Math.max(1, Math.ceil(shown.length / PAGE));
      const btn = (label, p, id) => el("button", {id, disabled: p < 0 || p >= pages || p === st.page ? "" : null,
        on: {click: () => { st.page = p; draw(); }}}, label);
      pager.append(btn("\u2190 previous", st.page - 1, "prev"),
        el("span", {}, " page " + (st.page + 1) + " of " + pages + " "), btn("next \u2192", st.page + 1, "next"));
    }
    await apply();
  }

  // ---------------------------------------------------------------- one task
  function verdictOf(r) {
    if (r.status === "gen_error") return ["gen_error", "generation failed"];
    if (r.reward === null) return ["unjudged", r.status === "ok" || !r.status ? "unjudged" : r.status];
    if (r.reward === 1) return ["pass", "pass"];
    if (r.reward === 0) return ["fail", "fail"];
    return ["partial", "partial " + fmt(r.reward)];
  }

  function conversation(messages) {
    return el("div", {class: "conversation"}, messages.map((m) =>
      el("div", {class: "msg " + (["system", "user", "assistant", "tool"].includes(m.role) ? m.role : "other")},
        el("div", {class: "role"}, m.role || "?"), el("pre", {}, m.content ?? ""))));
  }

  function kv(obj) {
    if (obj === null || obj === undefined) return null;
    if (typeof obj !== "object") return el("pre", {}, String(obj));
    const rows = Object.entries(obj).map(([k, v]) =>
      [k, typeof v === "object" && v !== null ? el("pre", {}, JSON.stringify(v, null, 2)) : String(v)]);
    return rows.length ? table(["field", "value"], rows, "grid kv") : null;
  }

  const RATIONALE = ["judge_text", "rationale", "explanation", "judge_output", "critique", "thoughts", "raw"];

  function completion(r, side) {
    const [cls, label] = verdictOf(r);
    const g = r.generation || {};
    const facts = [];
    if (g.finish_reason) facts.push(["finish", g.finish_reason]);
    for (const m of ["prompt_tokens", "completion_tokens"]) if (r.markers[m] !== undefined) facts.push([m.replace("_", " "), r.markers[m]]);
    const lat = (r.meta && r.meta.latency_s) ?? g.latency_s;
    if (lat !== undefined && lat !== null) facts.push(["latency", fmt(lat, 2) + " s"]);
    if (g.seed !== undefined && g.seed !== null) facts.push(["seed", g.seed]);
    if (g.served_model) facts.push(["model", g.served_model]);
    const otherMarkers = Object.entries(r.markers).filter(([k]) => !["prompt_tokens", "completion_tokens"].includes(k));
    const jm = r.judge_meta && typeof r.judge_meta === "object" ? Object.assign({}, r.judge_meta) : r.judge_meta;
    let rationale = null;
    if (jm && typeof jm === "object") {
      for (const k of RATIONALE) if (typeof jm[k] === "string") { rationale = jm[k]; delete jm[k]; break; }
    }
    return el("div", {class: "completion " + cls + (side ? " " + side : "")},
      el("div", {class: "chead"},
        el("span", {class: "verdict " + cls}, label),
        el("b", {}, " sample " + (r.i ?? "?")),
        el("span", {class: "muted"}, " reward " + fmt(r.reward) + (r.judge ? " \u00b7 graded by " + r.judge : "") +
          (r.status && r.status !== "ok" ? " \u00b7 status " + r.status : "")),
        facts.length ? el("div", {class: "facts"}, facts.map(([k, v]) => el("span", {class: "fact"}, k + ": " + v))) : null),
      r.reason ? el("div", {class: "reason"}, el("span", {class: "lbl"}, "reason "), r.reason) : null,
      el("pre", {class: "text"}, r.text ?? ""),
      rationale ? el("div", {class: "rationale"}, el("div", {class: "lbl"}, "judge's rationale"), el("pre", {}, rationale)) : null,
      otherMarkers.length ? el("div", {class: "markers"}, otherMarkers.map(([k, v]) => el("span", {class: "fact"}, k + " = " + fmt(v)))) : null,
      jm && (typeof jm !== "object" || Object.keys(jm).length) ? el("details", {}, el("summary", {}, "judge details"), kv(jm)) : null,
      r.meta ? el("details", {}, el("summary", {}, "record fields (meta)"), kv(r.meta)) : null);
  }

  function privileged(rows) {
    const seen = new Map();
    for (const r of rows) if (r.privileged && Object.keys(r.privileged).length) seen.set(JSON.stringify(r.privileged), r.privileged);
    if (!seen.size) return null;
    // long hidden tests start folded, so the completions stay in view
    const size = [...seen.keys()].reduce((n, k) => n + k.length, 0);
    return el("details", {class: "privileged", open: size < 600 ? "" : null},
      el("summary", {class: "lbl"}, "PRIVILEGED \u00b7 reference and hidden tests: the grader saw this, " +
        "the model did not" + (size < 600 ? "" : " (" + size + " characters: click to show)")),
      [...seen.values()].map((p) => el("div", {}, Object.entries(p).map(([k, v]) => privValue(k, v, 0)))));
  }

  // A privileged field: strings as they are (code keeps its lines), objects one level deep.
  function privValue(k, v, depth) {
    if (v !== null && typeof v === "object" && !Array.isArray(v) && depth < 2)
      return el("div", {class: "pnest"}, el("div", {class: "pkey"}, k),
        Object.entries(v).map(([k2, v2]) => privValue(k2, v2, depth + 1)));
    return el("div", {}, el("div", {class: "pkey"}, k),
      el("pre", {}, typeof v === "string" ? v : JSON.stringify(v, null, 2)));
  }

  async function taskPage(main, rest) {
    const src = META.sources.find((s) => s.index === Number(rest[0]));
    const id = rest.slice(1).join("/");
    if (!src) { main.append(section("Task", help("No such source."))); return; }
    const tasks = await tasksOf(src);
    const t = tasks.find((x) => x.id === id);
    if (!t) { main.append(section("Task", help("No task " + id + " in " + src.name + "."))); return; }
    const chunk = await load("rows:" + src.index + ":" + t.chunk, src.chunks[t.chunk]);
    const doc = chunk.find((x) => x.id === id);
    main.append(el("p", {class: "crumbs"}, el("a", {href: "#samples/" + src.index}, "\u2190 samples of " + src.name)));
    const box = section("Task " + id);
    box.id = "task-page";
    box.append(el("p", {}, (t.category !== null ? (src.by || "category") + " " + t.category + " \u00b7 " : "") +
      (t.n_binary ? t.n_pass + " of " + t.n_binary + " samples passed" : "no binary verdict") +
      " \u00b7 mean reward " + fmt(t.mean_reward) +
      src.rm.map((m, j) => " \u00b7 rm " + m + " " + fmt(t.rm[j])).join("")));
    box.append(el("h3", {}, "Prompt"), conversation(doc.messages), privileged(doc.rows));
    box.append(el("h3", {}, "Completions (" + doc.rows.length + ")"),
      el("div", {class: "completions"}, doc.rows.map((r) => completion(r))));
    main.append(box);
  }

  // ---------------------------------------------------------------- what changed
  function historyChart(points) {
    const W = 420, H = 120, P = 40, B = 22;   // left margin for values, bottom for nights
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("class", "chart");
    const vals = points.flatMap((p) => [p.low, p.high, p.value]).filter((v) => v !== null && v !== undefined);
    if (!vals.length) return svg;
    let lo = Math.min(...vals), hi = Math.max(...vals);
    if (hi - lo < 1e-9) { lo -= 0.05; hi += 0.05; }
    const x = (i) => P + 10 + (points.length < 2 ? (W - P - 40) / 2 : i * (W - P - 40) / (points.length - 1));
    const y = (v) => H - B - (v - lo) / (hi - lo) * (H - B - 10);
    const add = (tag, attrs) => { const e = document.createElementNS(ns, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); svg.appendChild(e); return e; };
    points.forEach((p, i) => {
      if (p.low !== null && p.low !== undefined) add("line", {x1: x(i), x2: x(i), y1: y(p.low), y2: y(p.high), class: "ci"});
      if (p.value !== null && p.value !== undefined) {
        const c = add("circle", {cx: x(i), cy: y(p.value), r: 4, class: p.regression ? "pt bad" : "pt"});
        const tt = document.createElementNS(ns, "title");
        tt.textContent = p.night + ": " + fmt(p.value) + " [" + fmt(p.low) + ", " + fmt(p.high) + "]";
        c.appendChild(tt);
      }
    });
    const path = points.map((p, i) => (p.value === null || p.value === undefined ? "" : (i ? "L" : "M") + x(i) + " " + y(p.value))).join(" ");
    add("path", {d: path.replace(/^L/, "M"), class: "line"});
    const lab = (t, xx, yy, anchor) => { const e = add("text", {x: xx, y: yy, "text-anchor": anchor}); e.textContent = t; };
    lab(fmt(hi), 2, 14, "start"); lab(fmt(lo), 2, H - B + 3, "start");
    lab(points[0].night, x(0), H - 4, "middle");
    if (points.length > 1) lab(points[points.length - 1].night, x(points.length - 1), H - 4, "middle");
    return svg;
  }

  async function changes(main, rest) {
    const n = META.nightly, ag = META.against;
    if (n) {
      main.append(verdictBanner(n));
      const hist = Object.entries(n.history || {});
      main.append(section("Gated metrics, night by night",
        help("Each gated metric of this study over its nights (95% intervals as bars; a red dot is a " +
          "night the gate flagged). Tonight against its baseline is in the table."),
        table(["source", "metric", "tonight", "95% CI", "baseline night", "baseline value", "delta", "delta 95% CI", "verdict"],
          n.tonight.flatMap((s) => s.metrics.filter((m) => m.gated).map((m) =>
            [s.source, m.metric, fmt(m.value), ci(m), s.baseline || "-", fmt(m.baseline_value), fmt(m.delta),
              m.delta_low === null || m.delta_low === undefined ? "" : "[" + fmt(m.delta_low) + ", " + fmt(m.delta_high) + "]",
              el("td", {class: m.regression ? "bad" : ""}, m.verdict || "-")])), "grid gated"),
        el("div", {class: "histories"}, hist.map(([k, pts]) => el("figure", {class: "history"},
          el("figcaption", {}, k), historyChart(pts))))));
    }
    if (!ag) {
      if (!n) main.append(section("What changed", help("Nothing to compare with: run `assay view RUN --against OTHER_RUN`.")));
      return;
    }
    const src = ag.sources.find((s) => s.index === Number(rest[0])) || ag.sources[0];
    const box = section("Tasks that moved: " + ag.run + " \u2192 " + META.run);
    box.id = "diff";
    main.append(box);
    const mine = {};
    for (const m of META.report.measurements || []) if (m.kind === "pass_at") {
      const e = (m.estimates || []).find((x) => String(x.name).startsWith("pass@1"));
      if (e) mine[m.source || m.label] = e;
    }
    box.append(help("pass@1 of each source in both runs (as each report states it), then every task whose " +
      "pass rate changed, largest move first. Click a task to see both runs' completions side by side."),
      table(["source", "pass@1 " + ag.run, "pass@1 " + META.run, "tasks in both", "moved", "pass\u2192fail", "fail\u2192pass"],
        ag.sources.map((s) => {
          const b = ag.headline[s.name] || {}, a = mine[s.name] || {};
          return [s.name, fmt(b.value) + " " + ci(b), fmt(a.value) + " " + ci(a), s.n_common, s.n_moved,
            s.flips["pass->fail"], s.flips["fail->pass"]];
        })));
    if (!src) return;
    if (ag.sources.length > 1) box.append(el("div", {class: "subtabs"}, ag.sources.map((s) =>
      el("a", {href: "#changes/" + s.index, class: s === src ? "on" : ""}, s.name))));
    const d = await load("diff:" + src.index, src.file);
    const only = el("input", {type: "checkbox", id: "only-flips"});
    const body = el("tbody", {});
    const rows = d.moved.map((m) => el("tr", {class: "moved-row " + (m.delta < 0 ? "worse" : "better"), data: {task: m.id},
      on: {click: () => { if (d.tasks[m.id]) go("pair", String(src.index), m.id); }}},
      el("td", {class: "id"}, m.id), el("td", {}, fmt(m.before, 2)), el("td", {}, fmt(m.after, 2)),
      el("td", {class: m.delta < 0 ? "bad" : "good"}, (m.delta > 0 ? "+" : "") + fmt(m.delta, 2)),
      el("td", {}, m.flip), el("td", {}, d.tasks[m.id] ? "side by side \u2192" : "(not kept)")));
    const fill = () => {
      body.textContent = "";
      body.append(...rows.filter((r, j) => !only.checked || d.moved[j].flip));
    };
    only.addEventListener("change", fill);
    fill();
    box.append(el("p", {id: "n-moved"}, d.moved.length + " tasks moved in " + src.name + ". " +
        "pass->fail: some sample passed in " + ag.run + ", none in " + META.run + "; fail->pass the other way."),
      el("label", {class: "chk"}, only, " only tasks that flipped between pass and fail"),
      el("table", {class: "grid moved"}, el("thead", {}, el("tr", {},
        ["task", "pass rate " + ag.run, "pass rate " + META.run, "change", "flip", ""].map((h) => el("th", {}, h)))),
      body));
  }

  async function pairPage(main, rest) {
    const ag = META.against;
    const src = ag && ag.sources.find((s) => s.index === Number(rest[0]));
    const id = rest.slice(1).join("/");
    if (!src) { main.append(section("What changed", help("No such source."))); return; }
    const d = await load("diff:" + src.index, src.file);
    const t = d.tasks[id];
    main.append(el("p", {class: "crumbs"}, el("a", {href: "#changes/" + src.index}, "\u2190 tasks that moved")));
    const box = section("Task " + id + ": " + ag.run + " vs " + META.run);
    box.id = "pair-page";
    if (!t) { box.append(help("This task's completions were not kept in the page.")); main.append(box); return; }
    box.append(el("h3", {}, "Prompt"), conversation(t.messages), privileged(t.after),
      el("div", {class: "sides"},
        el("div", {class: "side"}, el("h3", {}, "before: " + ag.run), t.before.map((r) => completion(r, "before"))),
        el("div", {class: "side"}, el("h3", {}, "after: " + META.run), t.after.map((r) => completion(r, "after")))));
    main.append(box);
  }
})();
