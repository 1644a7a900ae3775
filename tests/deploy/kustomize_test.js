// deploy/k8s: `kubectl kustomize` builds the base and each overlay; every object validates
// against the Kubernetes OpenAPI schemas with no unknown field; the semantic checks hold (GPUs
// only in the gpu overlay's encoder and prefill); hap-prefill serves the OpenAI HTTP API on 8000;
// and the base has not drifted from the chart: the same Deployments, Services and policies,
// containers with the same ports, probes, variables and mounts as the chart's default
// rendering (release "hap").
//
// node kustomize_test.js --kubectl BIN --k8s DIR --chart-rendered FILE
"use strict";

const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const { loadDocs, validateSchema } = require("./lib/k8s");
const { checkAll } = require("./lib/semantics");
const { Report } = require("./lib/report");

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
for (const need of ["kubectl", "k8s", "chart-rendered"]) {
  if (!args[need]) {
    console.error("usage: node kustomize_test.js --kubectl BIN --k8s DIR --chart-rendered FILE");
    process.exit(2);
  }
}
const report = new Report();

function build(dir) {
  // Deprecation notes (kustomize v5 on the `bases`/`patchesStrategicMerge` spelling that older
  // kubectl needs) go to stderr and are not failures.
  return loadDocs(execFileSync(args.kubectl, ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }));
}

const overlays = [
  { name: "base", dir: "base", gpus: {} },
  { name: "overlays/cpu", dir: "overlays/cpu", gpus: {}, namespace: "hap" },
  { name: "overlays/gpu", dir: "overlays/gpu", gpus: { encoder: 1, prefill: 1 }, namespace: "hap" },
];
const built = {};
for (const o of overlays) {
  let objs;
  try {
    objs = build(path.join(args.k8s, o.dir));
  } catch (e) {
    report.check(`${o.name}: kubectl kustomize builds it`, [String(e.stderr || e.message).trim()]);
    continue;
  }
  built[o.name] = objs;
  report.check(`${o.name}: kubectl kustomize builds it`, []);
  report.check(`${o.name}: ${objs.length} objects validate against the Kubernetes OpenAPI schemas, no unknown fields`,
    objs.flatMap(validateSchema));
  for (const [name, errs] of Object.entries(checkAll(objs, { gpus: o.gpus, networkPolicies: true }))) {
    report.check(`${o.name}: ${name}`, errs);
  }
  if (o.namespace) {
    report.check(`${o.name}: everything lands in namespace ${o.namespace}`, objs
      .filter((x) => x.kind !== "Namespace" && (x.metadata.namespace || "") !== o.namespace)
      .map((x) => `${x.kind}/${x.metadata.name} in '${x.metadata.namespace || ""}'`));
  }
}

// The front door serves the OpenAI-compatible HTTP API on 8000 in the base and both overlays:
// HAP_OPENAI_PORT, the container port `openai`, the Service port targeting it, admitted by the
// NetworkPolicy beside gRPC; the other services do not.
for (const [name, objs] of Object.entries(built)) {
  report.run(`${name}: hap-prefill serves the OpenAI HTTP API on 8000 (variable, container port, Service port, policy)`, () => {
    const errs = [];
    for (const c of ["encoder", "prefill", "decode"]) {
      const d = objs.find((o) => o.kind === "Deployment" && o.metadata.name === `hap-${c}`);
      const k = d.spec.template.spec.containers[0];
      const env = (k.env || []).find((e) => e.name === "HAP_OPENAI_PORT");
      const cport = (k.ports || []).find((p) => p.name === "openai");
      const svc = objs.find((o) => o.kind === "Service" && o.metadata.name === `hap-${c}`);
      const sport = svc.spec.ports.find((p) => p.name === "openai");
      if (c !== "prefill") {
        if (env || cport || sport) errs.push(`hap-${c} has an OpenAI port`);
        continue;
      }
      if (!env || env.value !== "8000") errs.push(`hap-prefill: HAP_OPENAI_PORT ${env && env.value}`);
      if (!cport || cport.containerPort !== 8000) errs.push("hap-prefill: no container port openai 8000");
      if (!sport || sport.port !== 8000 || sport.targetPort !== "openai") errs.push("Service hap-prefill: no port openai 8000 -> openai");
    }
    const np = objs.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === "hap-prefill");
    const rule = np.spec.ingress.find((r) => (r.ports || []).some((p) => p.port === "grpc"));
    if (!rule.ports.some((p) => p.port === "openai")) errs.push("NetworkPolicy hap-prefill: openai not admitted beside grpc");
    return errs;
  });
}

if (built["overlays/gpu"]) {
  report.run("overlays/gpu: encoder and prefill run the CUDA image on GPU nodes, decode the CPU image", () => {
    const errs = [];
    for (const d of built["overlays/gpu"].filter((x) => x.kind === "Deployment")) {
      const spec = d.spec.template.spec;
      const c = spec.containers[0];
      const gpu = ["hap-encoder", "hap-prefill"].includes(d.metadata.name);
      if (gpu !== /-cuda$/.test(c.image)) errs.push(`${d.metadata.name}: image ${c.image}`);
      const tolerates = (spec.tolerations || []).some((t) => t.key === "nvidia.com/gpu");
      if (gpu !== tolerates) errs.push(`${d.metadata.name}: GPU toleration ${tolerates}`);
    }
    return errs;
  });
}

// The base against the chart's default rendering.
if (built.base) {
  report.run("base matches the chart's default rendering (objects, ports, probes, variables, mounts)", () => {
    const chart = loadDocs(fs.readFileSync(args["chart-rendered"], "utf8"));
    const key = (o) => `${o.kind}/${o.metadata.name}`;
    const kinds = new Set(["Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget", "ServiceAccount", "PersistentVolumeClaim"]);
    const a = new Map(built.base.filter((o) => kinds.has(o.kind)).map((o) => [key(o), o]));
    const b = new Map(chart.filter((o) => kinds.has(o.kind)).map((o) => [key(o), o]));
    const errs = [];
    for (const k of b.keys()) if (!a.has(k)) errs.push(`base lacks ${k}`);
    for (const k of a.keys()) if (!b.has(k)) errs.push(`the chart renders no ${k}`);
    const same = (what, x, y) => {
      if (canonical(x) !== canonical(y)) errs.push(`${what}: base ${canonical(x)} vs chart ${canonical(y)}`);
    };
    for (const [k, o] of a) {
      const c = b.get(k);
      if (!c) continue;
      if (o.kind === "Deployment") {
        const x = o.spec.template.spec.containers[0];
        const y = c.spec.template.spec.containers[0];
        same(`${k} command`, x.command, y.command);
        same(`${k} ports`, x.ports, y.ports);
        for (const p of ["startupProbe", "readinessProbe", "livenessProbe"]) same(`${k} ${p}`, x[p], y[p]);
        same(`${k} variables`, (x.env || []).map((e) => e.name).sort(), (y.env || []).map((e) => e.name).sort());
        same(`${k} mounts`, x.volumeMounts, y.volumeMounts);
        same(`${k} pod labels`, o.spec.template.metadata.labels, stripHelm(c.spec.template.metadata.labels));
      }
      if (o.kind === "Service") same(`${k} ports`, o.spec.ports, c.spec.ports);
      if (o.kind === "NetworkPolicy") same(`${k} spec`, o.spec, c.spec);
    }
    return errs;
  });
}

// JSON with sorted keys: kustomize reorders fields.
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

function stripHelm(labels) {
  const out = { ...labels };
  for (const k of ["helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"]) delete out[k];
  return out;
}

report.finish();
