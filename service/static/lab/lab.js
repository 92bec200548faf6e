// Training Systems Lab: forms in, public API calls out, results drawn as the API returns them.
// Owns: tab navigation, presets, requests to this service, and showing answers and problems.
// Must not: compute any figure of the cost model (it only formats numbers it is given) or
// load anything from another origin.
"use strict";

const LABEL = "deterministic model, not a measurement";
const GIB = 2 ** 30;
const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");

// ---------- small DOM helpers ----------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    // Styles through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    else if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const gib = (bytes) => `${(bytes / GIB).toFixed(2)} GiB`;
// The limit a memory report checks its peak against, naming the safety margin when it has one.
const limitText = (report) => report.margin_bytes
  ? `${gib(report.limit_bytes)} (${gib(report.capacity_bytes)} usable less a ${gib(report.margin_bytes)} safety margin)`
  : `${gib(report.capacity_bytes)} usable`;
function seconds(s) {
  if (s === 0) return "0 s";
  if (Math.abs(s) >= 1) return `${s.toFixed(3)} s`;
  if (Math.abs(s) >= 1e-3) return `${(s * 1e3).toFixed(3)} ms`;
  return `${(s * 1e6).toFixed(2)} us`;
}
const pct = (f) => `${(100 * f).toFixed(1)}%`;
function table(header, rows, caption) {
  return el("div", { class: "table-wrap" }, el("table", {},
    caption ? el("caption", { class: "model-label", text: caption }) : null,
    el("thead", {}, el("tr", {}, header.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows.map((row) => el("tr", {}, row.map((cell) => el("td", { text: cell })))))));
}
function labelled(children) { return [children, el("p", { class: "model-label", text: `Figures: ${LABEL}.` })]; }
function figure(svgText, caption) {
  const parsed = new DOMParser().parseFromString(svgText, "image/svg+xml");
  const holder = el("div", { class: "picture", tabindex: "0", role: "group", "aria-label": caption });
  holder.append(document.importNode(parsed.documentElement, true));
  return el("figure", {}, holder, el("figcaption", {}, `${caption} (${LABEL})`));
}
function problemBox(problem) {
  const box = el("div", { class: "problem", role: "alert" },
    el("strong", { text: `${problem.title || "Problem"} [${problem.code}]` }), el("p", { class: "detail", text: problem.detail }));
  if (problem.errors && problem.errors.length) {
    box.append(el("ul", { class: "plain" }, problem.errors.map((e) => el("li", { text: `${e.loc.join(".")}: ${e.msg}` }))));
  }
  const relax = problem.explanation && problem.explanation.relaxations;
  if (relax && relax.length) {
    box.append(el("p", { text: "Smallest changes that make a plan exist:" }),
      el("ul", { class: "plain" }, relax.map((r) => el("li", { text: r }))));
  }
  return box;
}
function show(out, ...nodes) { out.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined)); }
function busy(out, what) { show(out, el("p", { class: "busy", role: "status", text: `${what}...` })); }

// ---------- API ----------
class ProblemError extends Error { constructor(problem) { super(problem.detail); this.problem = problem; } }
async function call(method, path, body, accept = "application/json") {
  const response = await fetch(path, {
    method, headers: body ? { "Content-Type": "application/json", Accept: accept } : { Accept: accept },
    body: body ? JSON.stringify(body) : undefined });
  if (!response.ok) {
    let problem;
    try { problem = await response.json(); } catch { problem = { code: String(response.status), detail: response.statusText }; }
    throw new ProblemError(problem);
  }
  return accept === "image/svg+xml" ? response.text() : response.json();
}
const post = (path, body) => call("POST", path, body);
const postSvg = (path, body) => call("POST", path, body, "image/svg+xml");
const getSvg = (path) => call("GET", path, null, "image/svg+xml");
async function guarded(out, what, work) {
  busy(out, what);
  try { await work(); } catch (error) {
    if (error instanceof ProblemError) show(out, problemBox(error.problem));
    else show(out, problemBox({ code: "network", title: "The service did not answer", detail: String(error) }));
  }
}

// ---------- forms ----------
function values(form) {
  const v = {};
  for (const field of form.elements) {
    if (!field.name) continue;
    if (field.type === "checkbox") v[field.name] = field.checked;
    else if (field.type === "number") v[field.name] = field.value === "" ? null : Number(field.value);
    else v[field.name] = field.value;
  }
  return v;
}
function fill(form, preset) {
  for (const [name, value] of Object.entries(preset)) {
    const field = form.elements.namedItem(name);
    if (!field) continue;
    if (field.type === "checkbox") field.checked = Boolean(value);
    else {
      if (field.tagName === "SELECT" && ![...field.options].some((o) => o.value === String(value))) {
        field.append(el("option", { value: String(value), text: String(value) }));
      }
      field.value = value === null ? "" : String(value);
    }
  }
}
const perStage = (text) => { const parts = String(text).split(/[ ,]+/).filter(Boolean).map(Number); return parts.length === 1 ? parts[0] : parts; };
const drop = (obj) => Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== null && v !== ""));

// ---------- tab 1: plan ----------
function planBody(v) {
  let model = { preset: v.model };
  if (v.hf_config.trim()) {
    try { model = { hf_config: JSON.parse(v.hf_config) }; } catch (e) {
      throw new ProblemError({ code: "invalid-request", title: "The pasted config.json is not JSON", detail: String(e.message) });
    }
  }
  return drop({
    model, objective: v.objective,
    cluster: { gpu: v.gpu, num_nodes: v.num_nodes, gpus_per_node: v.gpus_per_node },
    training: drop({ global_batch_size: v.global_batch_size, sequence_length: v.sequence_length, moe_load_imbalance: v.moe_load_imbalance }),
    constraints: v.gpu_hour_price ? { gpu_hour_price: v.gpu_hour_price } : null,
    solver: { time_limit_s: v.time_limit_s, top_k: 3 },
  });
}
function download(name, data, type = "application/json") {
  const url = URL.createObjectURL(new Blob([typeof data === "string" ? data : JSON.stringify(data, null, 2)], { type }));
  return el("a", { href: url, download: name, text: name });
}
async function runPlan(form, out) {
  await guarded(out, "Searching", async () => {
    const plan = await post("/v1/plans", planBody(values(form)));
    const p = plan.parallel;
    const rows = [
      ["status", plan.status], ["model", plan.model_name], ["GPUs", `${plan.world_size} x ${plan.gpu}`],
      ["layout", `TP${p.tp} PP${p.pp} DP${p.dp} CP${p.cp} EP${p.ep}, ${p.schedule}${p.vpp > 1 ? ` v=${p.vpp}` : ""}, ZeRO-${p.zero_stage}, micro-batch ${p.micro_batch_size}, ${plan.num_micro_batches} micro-batches`],
      ["step time", seconds(plan.time.step_time_s)], ["bubble", seconds(plan.time.bubble_s)],
      ["throughput", `${Math.round(plan.throughput.tokens_per_s).toLocaleString("en")} tokens/s, MFU ${pct(plan.throughput.mfu)}`],
      ["predicted range", plan.predicted_range ? plan.predicted_range.text : "none given"],
      ["peak memory", `${gib(plan.memory.peak_bytes)} of ${limitText(plan.memory)} (stage ${plan.memory.binding_stage})`]];
    const [timeline, memory] = await Promise.all([getSvg(`/v1/plans/${plan.id}/timeline.svg`), getSvg(`/v1/plans/${plan.id}/memory.svg`)]);
    const exports = Object.entries(plan.exports || {}).map(([name, data]) => download(`${name}.json`, data));
    show(out, labelled([
      el("h2", { text: `Plan ${plan.id}` }), el("p", { class: "summary", text: plan.explanation.summary }),
      table(["", "value"], rows),
      plan.explanation.binding_constraints.length ? [el("h3", { text: "What binds" }), el("ul", { class: "plain" }, plan.explanation.binding_constraints.map((b) => el("li", { text: b })))] : null,
      el("h3", { text: "Alternatives" }),
      table(["layout", "step time", "why not"], plan.alternatives.map((a) => [
        `TP${a.parallel.tp} PP${a.parallel.pp} DP${a.parallel.dp} ${a.parallel.schedule}${a.parallel.vpp > 1 ? ` v=${a.parallel.vpp}` : ""}`,
        a.step_time_s === null ? "does not fit" : seconds(a.step_time_s), a.why_not])),
      figure(timeline, "Pipeline timeline of the plan"), figure(memory, "Per-stage memory of the plan"),
      el("p", { class: "downloads" }, "Downloads: ", download(`plan-${plan.id}.json`, plan),
        el("a", { href: `/v1/plans/${plan.id}/trace`, download: `plan-${plan.id}-trace.json`, text: "trace (Perfetto)" }), exports),
    ]));
  });
}

// ---------- tab 2: memory ledger ----------
function memoryBody(v) {
  return {
    model: { preset: v.model },
    cluster: { gpu: v.gpu, num_nodes: v.num_nodes, gpus_per_node: v.gpus_per_node },
    training: { global_batch_size: v.global_batch_size, sequence_length: v.sequence_length, param_dtype: v.param_dtype,
      grad_dtype: v.grad_dtype, master_dtype: v.master_dtype || null, optimizer_state_dtype: v.optimizer_state_dtype },
    parallel: { tp: v.tp, pp: v.pp, dp: v.dp, schedule: v.schedule, zero_stage: Number(v.zero_stage), recompute: v.recompute,
      sequence_parallel: v.sequence_parallel, fp8_activations: v.fp8_activations, activation_offload_frac: v.activation_offload_frac,
      gradient_host_shards: v.gradient_host_shards },
  };
}
async function runMemory(form, out) {
  await guarded(out, "Sizing", async () => {
    const v = values(form);
    const body = memoryBody(v);
    const [report, picture, remote] = await Promise.all([post("/v1/ledger/memory", body), postSvg("/v1/ledger/memory?format=svg", body),
      v.remote_offload ? post("/v1/lab/remote-activations", body) : null]);
    const binding = report.stages.find((s) => s.stage === report.binding_stage);
    const largest = [...binding.components].sort((a, b) => b.bytes - a.bytes);
    const verdict = report.fits
      ? el("p", { class: "verdict-ok", text: `Fits: peak ${gib(report.peak_bytes)} on stage ${report.binding_stage} of ${limitText(report)}.` })
      : el("div", { class: "problem", role: "alert" }, el("strong", { text: "Out of memory" }),
          el("p", { class: "detail", text: `Stage ${report.binding_stage} needs ${gib(report.peak_bytes)} but the limit is ${limitText(report)}; its largest item is ${largest[0].name} (${gib(largest[0].bytes)}).` }));
    show(out, labelled([
      el("h2", { text: "Per-GPU memory ledger" }), verdict,
      table(["stage", "layers", "states (params+grads+optim)", "activations", "buffers/other", "host", "total", "in flight"],
        report.stages.map((s) => [String(s.stage), String(s.num_layers), gib(s.parameters_bytes + s.gradients_bytes + s.optimizer_bytes),
          gib(s.activations_bytes), gib(s.other_bytes), gib(s.host_bytes), gib(s.total_bytes), String(s.in_flight_micro_batches)])),
      el("h3", { text: `Stage ${report.binding_stage}, largest items first (the first to cut when it does not fit)` }),
      table(["item", "kind", "bytes", "how sized"], largest.map((c) => [c.name, c.kind, gib(c.bytes), c.note])),
      report.host_peak_bytes ? el("p", { text: `Host tier: ${gib(report.host_peak_bytes)} per GPU of ${gib(report.host_capacity_per_gpu_bytes)}.` }) : null,
      figure(picture, "Per-stage memory stack"),
      remote ? remoteSection(remote) : null,
    ]));
  });
}

function remoteSection(r) {
  return el("section", { class: "what-if", "aria-label": "Remote activation offload what-if" },
    el("h3", { text: `What-if, remote offload: peak ${gib(r.peak_bytes_before)} -> ${gib(r.peak_bytes_after)} (${r.fits_after ? "fits" : "does not fit"} ${gib(r.capacity_bytes)})` }),
    table(["stage", "before", "after", "sent", "received", "moved per step", "time per step", "same bytes over the host link"],
      r.stages.map((s) => [String(s.stage), gib(s.total_bytes_before), gib(s.total_bytes_after), gib(s.sent_bytes), gib(s.received_bytes),
        gib(s.bytes_per_step), seconds(s.seconds_per_step), seconds(s.host_link_seconds_per_step)]), `Between pipeline ranks: ${r.link}`),
    el("ul", { class: "plain" }, r.assumptions.map((a) => el("li", { text: `Assumes: ${a}` }))),
    el("p", { class: "model-label", text: `Source: ${r.source}.` }));
}

// ---------- tab 3: mesh ----------
function meshBody(v) {
  return { cluster: { num_nodes: v.num_nodes, gpus_per_node: v.gpus_per_node }, order: v.order, max_ranks: 64,
    parallel: { tp: v.tp, cp: v.cp, dp: v.dp, pp: v.pp, ep: v.ep, etp: v.etp, sequence_parallel: v.tp > 1 } };
}
function meshMemoryBody(v) {
  return { model: { preset: v.model }, cluster: { gpu: v.gpu, num_nodes: v.num_nodes, gpus_per_node: v.gpus_per_node },
    training: { global_batch_size: v.global_batch_size, sequence_length: v.sequence_length },
    parallel: { tp: v.tp, cp: v.cp, dp: v.dp, pp: v.pp, ep: v.ep, etp: v.etp, zero_stage: Number(v.zero_stage), sequence_parallel: v.tp > 1 } };
}
function memoryVerdict(report) {
  const binding = report.stages.find((s) => s.stage === report.binding_stage);
  const largest = [...binding.components].sort((a, b) => b.bytes - a.bytes)[0];
  return report.fits
    ? el("p", { class: "verdict-ok", text: `Fits: peak ${gib(report.peak_bytes)} on stage ${report.binding_stage} of ${limitText(report)}.` })
    : el("div", { class: "problem", role: "alert" }, el("strong", { text: "Out of memory" }),
        el("p", { class: "detail", text: `Stage ${report.binding_stage} needs ${gib(report.peak_bytes)} but the limit is ${limitText(report)}; its largest item is ${largest.name} (${gib(largest.bytes)}).` }));
}
async function runMesh(form, out) {
  await guarded(out, "Placing", async () => {
    const v = values(form);
    const body = meshBody(v);
    const [report, picture] = await Promise.all([post("/v1/mesh", body), postSvg(`/v1/mesh?format=svg&colour_by=${encodeURIComponent(v.colour_by)}`, body)]);
    let memory = null;
    if (v.model) {
      try { memory = [el("h3", { text: `Per-GPU memory of ${v.model} on this mesh` }), memoryVerdict(await post("/v1/ledger/memory", meshMemoryBody(v)))]; } catch (error) {
        if (!(error instanceof ProblemError)) throw error;
        memory = [el("h3", { text: `Per-GPU memory of ${v.model} on this mesh` }), problemBox(error.problem)];
      }
    }
    const problems = report.problems.map((p) => el("div", { class: p.severity === "error" ? "problem" : "note", role: p.severity === "error" ? "alert" : null },
      el("strong", { text: `${p.severity} [${p.rule}] ${p.field}` }), el("p", { class: "detail", text: p.message }),
      p.alternative ? el("p", { text: `Nearby valid alternative: ${p.alternative.change}` }) : null));
    show(out, labelled([
      el("h2", { text: `${report.world_size} GPUs: ${report.valid ? "valid" : "invalid"} mesh` }), problems, memory,
      el("h3", { text: "Group kinds: placement and collectives" }),
      table(["kind", "size x groups", "placement", "collectives (frequency)"], report.axes.map((a) => [a.kind, `${a.group_size} x ${a.num_groups}`,
        a.all_intra_node ? "inside a node" : `across ${a.max_nodes_spanned} nodes`,
        a.collectives.map((c) => `${c.collective} (${c.frequency.replaceAll("_", " ")})`).join(", ") || "none"])),
      el("h3", { text: "Ranks" }),
      table(["rank", "node", "GPU", "coordinates"], report.ranks.slice(0, 16).map((r) => [String(r.rank), String(r.node), String(r.local_rank),
        Object.entries(r.coords).map(([k, x]) => `${k}${x}`).join(" ")]), report.ranks.length > 16 ? `first 16 of ${report.ranks.length} listed ranks` : null),
      figure(picture, `Ranks on nodes, coloured by ${v.colour_by} group`),
    ]));
  });
}

// ---------- tab 4: pipeline ----------
function pipelineBody(v, overrides = {}) {
  return drop({ schedule: v.schedule, num_stages: v.num_stages, num_micro_batches: v.num_micro_batches, num_chunks: v.num_chunks,
    durations: { F: perStage(v.F), B: perStage(v.B), W: perStage(v.W) }, p2p_latency_s: v.p2p_latency_s,
    include_timeline: false, ...overrides });
}
function pipelineRows(result) {
  return [["makespan", seconds(result.makespan)], ["bubble", pct(result.bubble_fraction)],
    ["peak in-flight (stages, per rank)", result.peak_in_flight.map((x) => x.toFixed(1)).join(" ")],
    ["messages between ranks", String(result.transfers.length || "-")]];
}
async function runPipeline(form, out) {
  await guarded(out, "Simulating", async () => {
    const v = values(form);
    if (v.memory_limit) {
      const body = { ...pipelineBody(v), memory_limit: v.memory_limit, time_limit_s: 5, include_timeline: true };
      const result = await post("/v1/pipeline/optimize", body);
      show(out, labelled([el("h2", { text: `Optimised ${v.schedule} under ${v.memory_limit} stages in flight: ${result.status}` }),
        table(["", "value"], [...pipelineRows(result), ["best handcrafted", `${result.baseline_schedule} ${seconds(result.baseline_makespan)}`]])]));
      return;
    }
    const body = pipelineBody(v, { include_timeline: true });
    const [result, picture] = await Promise.all([post("/v1/pipeline/simulate", body), postSvg("/v1/pipeline/simulate?format=svg", body)]);
    show(out, labelled([el("h2", { text: `${v.schedule}: p=${v.num_stages}, m=${v.num_micro_batches}, v=${v.num_chunks}` }),
      table(["", "value"], pipelineRows({ ...result })), figure(picture, "Pipeline timeline"),
      el("p", { class: "downloads" }, download("trace.json", "", "application/json"))]));
    const traceLink = out.querySelector(".downloads a");
    const trace = await post("/v1/pipeline/simulate?format=trace", body);
    traceLink.href = URL.createObjectURL(new Blob([JSON.stringify(trace)], { type: "application/json" }));
    traceLink.textContent = "trace.json (open in Perfetto)";
  });
}
const CHOICES = [
  { who: "DeepSeek-V3", schedule: "dualpipe", chunks: 1,
    why: "DualPipe (PP16, EP64 on 2,048 H800): overlaps forward and backward of two micro-batches to hide the expert all-to-all, at the price of two copies of each stage's parameters and gradients (DeepSeek-V3 report, Sec. 3.2)." },
  { who: "Kimi K2", schedule: "interleaved_1f1b", chunks: 2,
    why: "Interleaved 1F1B (PP16, v=2 here): K2 did not adopt DualPipe because doubling parameters and gradients would need more PP or EP; extra warm-up micro-batches hide the EP communication instead (Kimi K2 report, Sec. 2.4)." }];
// Each rank's op times split evenly over its `chunks` chunks (one value per virtual stage in
// layer order, virtual stage s on rank s mod p), so that every choice does the same work.
function perChunk(times, stages, chunks) {
  if (chunks === 1) return times;
  if (typeof times === "number") return times / chunks;
  if (times.length !== stages) return times;  // already one per virtual stage: as given
  return Array.from({ length: stages * chunks }, (_, s) => times[s % stages] / chunks);
}
async function runCompare(form, out) {
  await guarded(out, "Simulating both choices", async () => {
    const v = values(form);
    const p = v.num_stages;
    const runs = await Promise.all(CHOICES.map(async (c) => {
      const durations = { F: perChunk(perStage(v.F), p, c.chunks), B: perChunk(perStage(v.B), p, c.chunks), W: perChunk(perStage(v.W), p, c.chunks) };
      const body = pipelineBody(v, { schedule: c.schedule, num_chunks: c.chunks, durations, include_timeline: true });
      const [result, picture] = await Promise.all([post("/v1/pipeline/simulate", body), postSvg("/v1/pipeline/simulate?format=svg", body)]);
      return { c, result, picture };
    }));
    const columns = runs.map(({ c, result }) => el("div", { class: "choice" }, el("h3", { text: `${c.who}: ${c.schedule}` }), el("p", { text: c.why }),
      table(["", "value"], pipelineRows(result))));
    const pictures = runs.map(({ c, picture }) => figure(picture, `${c.who}'s ${c.schedule}, p=${p}, m=${v.num_micro_batches}, v=${c.chunks}`));
    const split = CHOICES.filter((c) => c.chunks > 1).map((c) => `${c.who}'s ${c.schedule} runs them as v=${c.chunks} chunks of 1/${c.chunks} the time each`);
    show(out, labelled([el("h2", { text: `The same p=${p}, m=${v.num_micro_batches} and work per rank under each choice` }),
      el("p", { class: "what-differs", text: `Each rank's F / B / W from the form is its whole share of the model; ${split.join("; ")}. DualPipe holds two stages per rank (one per direction), which doubles their parameters, not their work.` }),
      el("div", { class: "side-by-side" }, columns), ...pictures]));
  });
}

// ---------- tab 5: communication / MoE ----------
async function runCollective(form, out) {
  await guarded(out, "Estimating", async () => {
    const v = values(form);
    const r = await post("/v1/collectives/estimate", drop({ collective: v.collective, num_ranks: v.num_ranks, message_bytes: v.message_bytes, bandwidth_bytes_per_s: v.bandwidth_bytes_per_s, latency_s: v.latency_s, overlap_frac: v.overlap_frac, overlap_window_s: v.overlap_window_s }));
    const share = r.time_s > 0 ? r.exposed_s / r.time_s : 0;
    show(out, labelled([el("h2", { text: `${r.collective} of ${gib(r.message_bytes)} over ${r.num_ranks} ranks: ${r.algorithm} on ${r.link}` }),
      table(["", "value"], [["time (alpha + beta)", seconds(r.time_s)], ["alpha (latency)", seconds(r.alpha_s)], ["beta (bandwidth)", seconds(r.beta_s)],
        ["bytes sent per rank", gib(r.bytes_sent_per_rank)], ["bus bandwidth", `${(r.bus_bandwidth_bytes_per_s / 1e9).toFixed(1)} GB/s`]]),
      el("h3", { text: "Exposed against hidden time" }),
      el("div", { class: "split", role: "img", "aria-label": `exposed ${pct(share)} of the collective's time` },
        el("span", { class: "exposed", style: { width: `${(100 * share).toFixed(1)}%` } }), el("span", { class: "hidden-part", style: { width: `${(100 * (1 - share)).toFixed(1)}%` } })),
      table(["", "value"], [["exposed (on the critical path)", seconds(r.exposed_s)], ["hidden behind compute", seconds(r.hidden_s)], ["exposed share", pct(share)]], "Split under the overlap input"),
      r.phases.length ? table(["phase", "links", "ranks", "bytes per rank", "alpha", "beta"], r.phases.map((p) => [`${p.collective} (${p.algorithm})`, p.link, String(p.num_ranks), gib(p.bytes_sent_per_rank), seconds(p.alpha_s), seconds(p.beta_s)]), "Hierarchical phases") : null]));
  });
}
async function runMoe(form, out) {
  await guarded(out, "Placing experts", async () => {
    const v = values(form);
    let tokens;
    try { tokens = JSON.parse(v.tokens); } catch (e) { throw new ProblemError({ code: "invalid-request", title: "Token counts are not JSON", detail: String(e.message) }); }
    const body = drop({ num_experts: v.num_experts, top_k: v.top_k, tokens, tile_rows: v.tile_rows });
    if (v.gpu) Object.assign(body, { gpu: v.gpu, hidden_size: v.hidden_size, expert_ffn_hidden_size: v.expert_ffn_hidden_size });
    const [r, picture] = await Promise.all([post("/v1/moe/placement", body), postSvg("/v1/moe/placement?format=svg", body)]);
    const imbalanced = r.no_redundancy_imbalance > 1.2;
    const timed = r.rank_expert_gemm_s !== null;
    const skewed = (timed ? r.expert_gemm_imbalance : r.gemm_rows_imbalance) > 1.05;
    const experts = (row) => row.map((n, e) => (n ? `e${e}:${n}` : null)).filter(Boolean).join(" ");
    show(out, labelled([el("h2", { text: `Every rank computes ${r.capacity_per_rank} tokens with ${r.num_redundant_experts} replicas` }),
      el("h3", { text: "Rank balance (tokens each rank computes)" }),
      el("p", { class: imbalanced ? "verdict-bad" : "verdict-ok", text: `Rank balance without replicas: max/mean ${r.no_redundancy_imbalance.toFixed(3)}${imbalanced ? " (imbalanced)" : ""}; after placement max/mean ${r.rank_load_imbalance.toFixed(3)}, every rank load is ${r.capacity_per_rank}.` }),
      table(["rank", "load after", "hosted replicas", "fewest possible"], r.rank_loads.map((load, i) => [String(i), String(load), r.redundant_experts[i].join(",") || "-", String(r.lower_bound_per_rank[i])])),
      el("h3", { text: "Inside each rank: expert GEMM makespan" }),
      el("p", { class: skewed ? "verdict-bad expert-makespan" : "verdict-ok expert-makespan", text: timed
        ? `Slowest rank's expert GEMMs: ${seconds(r.expert_gemm_makespan_s)} forward (max/mean ${r.expert_gemm_imbalance.toFixed(3)}${skewed ? ", skewed inside ranks" : ""}); the layer waits for this rank even when rank loads are equal.`
        : `Tile-padded GEMM rows: max/mean ${r.gemm_rows_imbalance.toFixed(3)}${skewed ? ", skewed inside ranks" : ""}. Pick a GPU to time each rank's expert GEMMs.` }),
      table(["rank", "tokens per expert", "padded rows", "sum of expert GEMM times"], r.rank_expert_tokens.map((row, i) => [String(i), experts(row),
        String(r.rank_gemm_rows[i]), timed ? seconds(r.rank_expert_gemm_s[i]) : "-"]), "Per-rank expert work"),
      table(["", "value"], [["remote tokens", String(r.remote_tokens)], ["migrated tokens", String(r.migrated_tokens)], ["prefetch", gib(r.prefetch_bytes)], ["gradient reduce", gib(r.grad_reduce_bytes)]]),
      figure(picture, "Rank loads before and after, routes")]));
  });
}

async function runBuffers(form, out) {
  await guarded(out, "Sizing buffers", async () => {
    const r = await post("/v1/moe/buffers", drop(values(form)));
    const verdicts = [];
    if (r.budget_bytes !== null) {
      for (const [who, fits, bytes] of [["DeepEP-style worst case", r.deepep_fits, r.deepep_worst_case_bytes], ["MoonEP fixed", r.moonep_fits, r.moonep_padded_bytes]]) {
        verdicts.push(fits
          ? el("p", { class: "verdict-ok", text: `${who}: ${gib(bytes)} fits the ${gib(r.budget_bytes)} budget.` })
          : el("div", { class: "problem", role: "alert" }, el("strong", { text: "Out of memory" }),
              el("p", { class: "detail", text: `${who}: ${gib(bytes)} does not fit the ${gib(r.budget_bytes)} budget per rank.` })));
      }
    }
    show(out, labelled([el("h2", { text: `Receive buffer per rank: DeepEP worst case is ${r.ratio.toFixed(1)}x MoonEP's` }), verdicts,
      table(["buffer", "rows", "bytes"], [["DeepEP-style worst case (S*K*R)", String(r.deepep_worst_case_rows), gib(r.deepep_worst_case_bytes)],
        ["MoonEP (S*K)", String(r.moonep_rows), "-"], ["MoonEP padded", String(r.moonep_padded_rows), gib(r.moonep_padded_bytes)]]),
      el("p", { class: "model-label", text: `Source: ${r.source}.` })]));
  });
}

// ---------- tab 6: RL memory seesaw ----------
function seesawBody(v) {
  return {
    model: { preset: v.model },
    cluster: { gpu: v.gpu, num_nodes: v.num_nodes, gpus_per_node: v.gpus_per_node },
    training: { global_batch_size: v.global_batch_size, sequence_length: v.sequence_length, optimizer: v.optimizer },
    parallel: { tp: v.tp, pp: v.pp, dp: v.dp, ep: v.ep, vpp: v.vpp, schedule: v.schedule, zero_stage: 1,
      recompute: v.recompute, gradient_host_shards: v.gradient_host_shards },
    rollout: drop({ tp: v.rollout_tp, pp: v.rollout_pp, weight_dtype: v.weight_dtype, kv_dtype: v.kv_dtype,
      context_length: v.context_length, offload_tier: v.offload_tier, nvme_bandwidth_bytes_per_s: v.nvme_bandwidth_bytes_per_s,
      external_kv_pool: v.external_kv_pool, pipelined_update: v.pipelined_update, reuse_gradient_buffer: v.reuse_gradient_buffer }),
  };
}
async function runSeesaw(form, out) {
  await guarded(out, "Sizing the phases", async () => {
    const body = seesawBody(values(form));
    const [r, picture] = await Promise.all([post("/v1/lab/rl-seesaw", body), postSvg("/v1/lab/rl-seesaw?format=svg", body)]);
    const over = r.phases.filter((p) => !p.fits_gpu);
    const verdict = over.length === 0
      ? el("p", { class: "verdict-ok", text: `Every phase fits ${gib(r.capacity_bytes)} usable; transitions take ${seconds(r.transition_s)} per iteration.` })
      : el("div", { class: "problem", role: "alert" }, el("strong", { text: "Out of memory" }),
          el("p", { class: "detail", text: over.map((p) => `${p.name} needs ${gib(p.gpu_bytes)}`).join("; ") + ` of ${gib(r.capacity_bytes)} usable.` }));
    const kv = r.kv_cache, ck = r.checkpoint_engine, ref = r.reference;
    show(out, labelled([
      el("h2", { text: `Colocated RL on training stage ${r.binding_stage}'s GPU` }), verdict,
      table(["phase", "GPU", "host per GPU", "fits"], r.phases.map((p) => [p.name, gib(p.gpu_bytes), gib(p.host_bytes_per_gpu), p.fits_gpu ? "yes" : "no"])),
      table(["transition", "from", "to", "bytes per GPU", "time", "bounded by"],
        r.transitions.map((t) => [t.name, t.before, t.after, gib(t.bytes_per_gpu), seconds(t.seconds), t.link]), "Transitions"),
      table(["", "value"], [["KV bytes per token per GPU", String(Math.round(kv.bytes_per_token_per_gpu))],
        ["GPU KV pool", `${gib(kv.gpu_pool_bytes)} (${kv.gpu_pool_tokens} tokens per instance)`],
        ["whole contexts decoding from the GPU", String(kv.active_contexts)],
        ["external pool per GPU", kv.external_pool_bytes_per_gpu ? `${gib(kv.external_pool_bytes_per_gpu)} (${kv.parked_contexts} parked contexts, ${seconds(kv.prefetch_s)} to bring one back; filling it writes ${gib(kv.write_back_bytes_per_gpu)} write-back against ${gib(kv.write_through_bytes_per_gpu)} write-through)` : "none"],
        ["weight update", `serial ${seconds(ck.serial_s)}, pipelined ${seconds(ck.pipelined_s)}; each GPU receives ${gib(ck.received_bytes_per_gpu)} for a ${gib(ck.needed_bytes_per_gpu)} shard`],
        ["reference weights", `${gib(ref.weight_bytes)} per GPU, ${ref.extra_gpu_bytes === 0 ? "held in the gradient buffers" : `${gib(ref.extra_gpu_bytes)} extra`} (per ${ref.slot})`]], "Rollout KV cache, weight update, reference model"),
      el("ul", { class: "plain" }, r.assumptions.map((a) => el("li", { text: `Assumes: ${a}` }))),
      figure(picture, "GPU memory by phase"),
      el("p", { class: "model-label", text: `Source: ${r.source}.` }),
    ]));
  });
}

// ---------- tab 7: checkpoints and failures ----------
function runBody(v) {
  return {
    model: { preset: v.model },
    cluster: { gpu: v.gpu, num_nodes: v.num_nodes, gpus_per_node: v.gpus_per_node },
    training: { global_batch_size: v.global_batch_size, sequence_length: v.sequence_length },
    parallel: { tp: v.tp, pp: v.pp, dp: v.dp, zero_stage: Number(v.zero_stage), recompute: v.recompute },
    token_budget: v.token_budget,
    reliability: drop({ failures_per_gpu_hour: v.failures_per_gpu_hour, storage_bandwidth_bytes_per_s: v.storage_bandwidth_bytes_per_s,
      node_storage_bandwidth_bytes_per_s: v.node_storage_bandwidth_bytes_per_s, restart_s: v.restart_s,
      checkpoint_interval_s: v.checkpoint_interval_s, async_save: v.async_save }),
  };
}
const hours = (s) => s >= 3600 ? `${(s / 3600).toPrecision(3)} h` : s >= 60 ? `${(s / 60).toPrecision(3)} min` : seconds(s);
async function runRun(form, out) {
  await guarded(out, "Estimating the run", async () => {
    const body = runBody(values(form));
    const [r, picture] = await Promise.all([post("/v1/run/estimate", body), postSvg("/v1/run/estimate?format=svg", body)]);
    const c = r.reliability;
    // A configuration that does not fit is answered as a no-feasible-plan problem.
    const verdict = el("p", { class: "verdict-ok", text: `Goodput ${(100 * c.goodput).toFixed(1)}% saving every ${hours(c.checkpoint_interval_s)}: ${c.wall_days.toFixed(1)} days of wall time for ${r.train_days.toFixed(1)} days of training.` });
    show(out, labelled([
      el("h2", { text: `${r.world_size} GPUs, ${r.num_steps.toLocaleString("en")} steps of ${seconds(r.step_time_s)}` }), verdict,
      table(["", "value"], [["checkpoint", `${gib(c.checkpoint_bytes)} (${gib(c.checkpoint_bytes_per_rank)} per rank)`],
        ["write / training stopped per save", `${seconds(c.checkpoint_write_s)} / ${seconds(c.checkpoint_blocking_s)}`],
        ["job mean time between failures", hours(c.job_mtbf_s)],
        ["Young / Daly optimum", `${hours(c.young_interval_s)} / ${hours(c.daly_interval_s)}`],
        ["interval evaluated", hours(c.checkpoint_interval_s)],
        ["failures expected", c.expected_failures.toFixed(0)],
        ["wall time with failures", `${c.wall_days.toFixed(1)} days (${Math.round(c.gpu_hours).toLocaleString("en")} GPU-hours)`]], "Checkpoints and failures"),
      figure(picture, "Goodput against checkpoint interval"),
    ]));
  });
}

// ---------- presets ----------
const PRESETS = {
  "plan-fits": ["form-plan", { model: "llama-3.1-8b", hf_config: "", gpu: "h100-sxm5-80gb", num_nodes: 1, gpus_per_node: 8, global_batch_size: 64, sequence_length: 4096, moe_load_imbalance: 1, time_limit_s: 20 }],
  "plan-invalid": ["form-plan", { model: "llama-3.1-8b", hf_config: "", num_nodes: 0, gpus_per_node: 8 }],
  "plan-oom": ["form-plan", { model: "llama-3.1-405b", hf_config: "", gpu: "h100-sxm5-80gb", num_nodes: 1, gpus_per_node: 8, global_batch_size: 64, sequence_length: 4096, moe_load_imbalance: 1, time_limit_s: 20 }],
  "plan-imbalance": ["form-plan", { model: "mixtral-8x7b", hf_config: "", gpu: "h100-sxm5-80gb", num_nodes: 2, gpus_per_node: 8, global_batch_size: 64, sequence_length: 4096, moe_load_imbalance: 1.6, time_limit_s: 30 }],
  "memory-fits": ["form-memory", { model: "llama-3.1-70b", num_nodes: 8, gpus_per_node: 8, tp: 8, pp: 4, dp: 2, zero_stage: 1, schedule: "1f1b", recompute: "selective", remote_offload: false }],
  "memory-invalid": ["form-memory", { model: "llama-3.1-70b", num_nodes: 1, gpus_per_node: 8, tp: 3, pp: 1, dp: 8, remote_offload: false }],
  "memory-oom": ["form-memory", { model: "llama-3.1-70b", num_nodes: 1, gpus_per_node: 8, global_batch_size: 64, sequence_length: 4096, tp: 1, pp: 1, dp: 8, zero_stage: 0, remote_offload: false }],
  "memory-imbalance": ["form-memory", { model: "llama-3.1-70b", num_nodes: 8, gpus_per_node: 8, global_batch_size: 512, sequence_length: 8192, tp: 8, pp: 8, dp: 1, zero_stage: 1, schedule: "1f1b", remote_offload: true }],
  "mesh-fits": ["form-mesh", { model: "", num_nodes: 4, gpus_per_node: 8, tp: 2, cp: 2, dp: 4, pp: 2, ep: 4, etp: 2, order: "tp-cp-ep-dp-pp", colour_by: "tp" }],
  "mesh-invalid": ["form-mesh", { model: "", num_nodes: 2, gpus_per_node: 8, tp: 3, cp: 1, dp: 2, pp: 2, ep: 1, etp: 1, order: "tp-cp-ep-dp-pp" }],
  "mesh-cross": ["form-mesh", { model: "", num_nodes: 2, gpus_per_node: 8, tp: 16, cp: 1, dp: 1, pp: 1, ep: 1, etp: 1, order: "tp-cp-ep-dp-pp", colour_by: "tp" }],
  "mesh-oom": ["form-mesh", { num_nodes: 1, gpus_per_node: 8, tp: 2, cp: 1, dp: 4, pp: 1, ep: 1, etp: 1, order: "tp-cp-ep-dp-pp", colour_by: "dp", model: "llama-3.1-70b", gpu: "h100-sxm5-80gb", global_batch_size: 64, sequence_length: 4096, zero_stage: 0 }],
  "mesh-imbalance": ["form-mesh", { model: "", num_nodes: 2, gpus_per_node: 4, tp: 1, cp: 1, dp: 8, pp: 1, ep: 8, etp: 1, order: "tp-cp-ep-dp-pp", colour_by: "ep" }],
  "pipeline-fits": ["form-pipeline", { schedule: "zb_h1", num_stages: 4, num_micro_batches: 8, num_chunks: 1, F: "1.0", B: "1.0", W: "1.0", p2p_latency_s: 0.05, memory_limit: null }],
  "pipeline-invalid": ["form-pipeline", { schedule: "interleaved_1f1b", num_stages: 4, num_micro_batches: 8, num_chunks: 1, memory_limit: null }],
  "pipeline-oom": ["form-pipeline", { schedule: "1f1b", num_stages: 4, num_micro_batches: 8, num_chunks: 1, F: "1.0", B: "1.0", W: "1.0", memory_limit: 0.5 }],
  "pipeline-imbalance": ["form-pipeline", { schedule: "1f1b", num_stages: 4, num_micro_batches: 8, num_chunks: 1, F: "1.0 1.0 1.0 2.0", B: "1.0 1.0 1.0 2.0", W: "1.0", memory_limit: null }],
  "comm-fits": ["form-collective", { collective: "all_reduce", num_ranks: 16, message_bytes: 1073741824, bandwidth_bytes_per_s: 50e9, latency_s: 1e-5, overlap_frac: 0.9, overlap_window_s: 0.02 }],
  "comm-invalid": ["form-collective", { collective: "all_reduce", num_ranks: 0, message_bytes: 1073741824, bandwidth_bytes_per_s: 50e9, latency_s: 1e-5 }],
  "comm-oom": ["form-buffers", { tokens_per_rank: 8192, top_k: 8, ep_size: 64, experts_per_rank: 4, hidden_size: 7168, bytes_per_elem: 2, token_padding: 128, budget_bytes: 8589934592 }],
  "rl-fits": ["form-rl", { model: "kimi-k2-instruct", gpu: "h800-sxm5-80gb", num_nodes: 32, gpus_per_node: 8, global_batch_size: 256, sequence_length: 4096, optimizer: "muon", tp: 1, pp: 16, dp: 16, ep: 16, vpp: 2, schedule: "interleaved_1f1b", recompute: "full", gradient_host_shards: true, rollout_tp: 16, rollout_pp: 1, weight_dtype: "fp8", kv_dtype: "bf16", context_length: 131072, offload_tier: "host", nvme_bandwidth_bytes_per_s: null, external_kv_pool: false, pipelined_update: false, reuse_gradient_buffer: true }],
  "rl-invalid": ["form-rl", { offload_tier: "nvme", nvme_bandwidth_bytes_per_s: null }],
  "rl-oom": ["form-rl", { model: "kimi-k2-instruct", gpu: "h800-sxm5-80gb", num_nodes: 32, gpus_per_node: 8, global_batch_size: 256, sequence_length: 4096, optimizer: "adam", tp: 1, pp: 16, dp: 16, ep: 16, vpp: 2, schedule: "interleaved_1f1b", recompute: "full", gradient_host_shards: true, offload_tier: "host", nvme_bandwidth_bytes_per_s: null }],
  "rl-imbalance": ["form-rl", { model: "kimi-k2-instruct", gpu: "h800-sxm5-80gb", num_nodes: 32, gpus_per_node: 8, global_batch_size: 256, sequence_length: 4096, optimizer: "muon", tp: 1, pp: 16, dp: 16, ep: 16, vpp: 2, schedule: "interleaved_1f1b", recompute: "full", gradient_host_shards: true, rollout_tp: 16, context_length: 1048576, offload_tier: "nvme", nvme_bandwidth_bytes_per_s: 2e10, external_kv_pool: true, pipelined_update: true }],
  "run-fits": ["form-run", { model: "llama-3.1-70b", gpu: "h100-sxm5-80gb", num_nodes: 128, gpus_per_node: 8, global_batch_size: 1024, sequence_length: 8192, token_budget: 15e12, tp: 8, pp: 4, dp: 32, zero_stage: 1, recompute: "selective", failures_per_gpu_hour: 1.97e-5, storage_bandwidth_bytes_per_s: 2e12, node_storage_bandwidth_bytes_per_s: 1e11, restart_s: 600, checkpoint_interval_s: null, async_save: false }],
  "run-invalid": ["form-run", { token_budget: 0 }],
  "run-oom": ["form-run", { model: "llama-3.1-70b", gpu: "h100-sxm5-80gb", num_nodes: 1, gpus_per_node: 8, global_batch_size: 64, sequence_length: 4096, token_budget: 1e12, tp: 1, pp: 1, dp: 8, zero_stage: 0, recompute: "selective", checkpoint_interval_s: null }],
  "run-imbalance": ["form-run", { model: "llama-3.1-70b", gpu: "h100-sxm5-80gb", num_nodes: 128, gpus_per_node: 8, global_batch_size: 1024, sequence_length: 8192, token_budget: 15e12, tp: 8, pp: 4, dp: 32, zero_stage: 1, recompute: "selective", failures_per_gpu_hour: 1.97e-4, storage_bandwidth_bytes_per_s: 5e10, node_storage_bandwidth_bytes_per_s: 1e11, restart_s: 600, checkpoint_interval_s: null, async_save: false }],
  "comm-imbalance": ["form-moe", { num_experts: 8, top_k: 2, tokens: "[[30,1,1,0,0,0,0,0],[28,2,1,1,0,0,0,0],[31,0,0,1,0,0,0,0],[29,1,1,1,0,0,0,0]]", gpu: "h100-sxm5-80gb", hidden_size: 7168, expert_ffn_hidden_size: 2048, tile_rows: 128 }],
};
const RUNNERS = { "form-plan": runPlan, "form-memory": runMemory, "form-mesh": runMesh, "form-pipeline": runPipeline,
  "form-collective": runCollective, "form-moe": runMoe, "form-buffers": runBuffers, "form-rl": runSeesaw, "form-run": runRun };
const OUTPUTS = { "form-plan": "out-plan", "form-memory": "out-memory", "form-mesh": "out-mesh", "form-pipeline": "out-pipeline",
  "form-collective": "out-comm", "form-moe": "out-comm", "form-buffers": "out-comm", "form-rl": "out-rl", "form-run": "out-run" };

function submit(formId) {
  const form = document.getElementById(formId);
  const out = document.getElementById(OUTPUTS[formId]);
  const done = RUNNERS[formId](form, out);
  done.then(() => out.scrollIntoView({ behavior: reducedMotion.matches ? "auto" : "smooth", block: "nearest" }));
  return done;
}

// ---------- tabs (WAI-ARIA tabs pattern: arrows, Home, End; automatic activation) ----------
function selectTab(tab, focus = true) {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  for (const other of tabs) {
    const selected = other === tab;
    other.setAttribute("aria-selected", String(selected));
    other.tabIndex = selected ? 0 : -1;
    document.getElementById(other.getAttribute("aria-controls")).hidden = !selected;
  }
  if (focus) tab.focus();
  history.replaceState(null, "", `#${tab.id.replace("tab-", "")}`);
}
function setUpTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => selectTab(tab));
    tab.addEventListener("keydown", (event) => {
      const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1 };
      if (!(event.key in moves)) return;
      event.preventDefault();
      selectTab(tabs[(moves[event.key] + tabs.length) % tabs.length]);
    });
  });
  const wanted = document.getElementById(`tab-${location.hash.slice(1)}`);
  if (wanted) selectTab(wanted, false);
}

async function loadCatalog() {
  try {
    const [models, gpus] = await Promise.all([call("GET", "/v1/catalog/models"), call("GET", "/v1/catalog/gpus")]);
    const ids = { models: models.models.map((m) => m.id), gpus: gpus.gpus.map((g) => g.id) };
    for (const select of document.querySelectorAll("select[data-catalog]")) {
      const current = select.value;
      const blank = select.dataset.blank ? [el("option", { value: "", text: select.dataset.blank })] : [];
      select.replaceChildren(...blank, ...ids[select.dataset.catalog].map((id) => el("option", { value: id, text: id })));
      select.value = current;
    }
  } catch { /* the built-in options stay */ }
}

document.addEventListener("DOMContentLoaded", () => {
  setUpTabs();
  loadCatalog();
  for (const formId of Object.keys(RUNNERS)) {
    document.getElementById(formId).addEventListener("submit", (event) => { event.preventDefault(); submit(formId); });
  }
  document.getElementById("compare").addEventListener("click", () => runCompare(document.getElementById("form-pipeline"), document.getElementById("out-pipeline")));
  for (const button of document.querySelectorAll("[data-preset]")) {
    button.addEventListener("click", () => {
      const [formId, preset] = PRESETS[button.dataset.preset];
      fill(document.getElementById(formId), preset);
      submit(formId);
    });
  }
  document.body.dataset.ready = "true";
});
