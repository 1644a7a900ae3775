// Checks that catch real deployment mistakes the schemas accept: GPUs where they were not asked
// for, probes on a port the container does not open, Services and policies that select no pod
// (or the wrong ones), containers without requests, floating image tags. Each check returns a
// list of messages; empty means it holds.
"use strict";

const COMPONENT = "app.kubernetes.io/component";
const SERVICES = ["encoder", "prefill", "decode"];
const WORKLOAD_KINDS = new Set(["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"]);
// HAP_* variables the services parse as integers (services/server/options.cc).
const INTEGER_ENV = new Set([
  'HAP_PORT',
  'HAP_THREADS',
  'HAP_MAX_CONCURRENT',
  'HAP_QUEUE_LENGTH',
  'HAP_MAX_MESSAGE_BYTES',
  'HAP_DRAIN_TIMEOUT_MS',
  'HAP_MAX_IMAGE_BYTES',
  'HAP_MAX_IMAGE_PIXELS',
  'HAP_MAX_PROMPT_TOKENS',
  'HAP_KV_LEASE_MS',
  'HAP_MAX_KV_BYTES',
  'HAP_METRICS_PORT',
  'HAP_OPENAI_PORT',
  'HAP_AUTH_MAX_CONCURRENT_PER_CLIENT',
  'HAP_PREFILL_CHUNK_TOKENS',
  'HAP_PREFILL_BATCH_TOKENS',
  'HAP_MAX_ACTIVE_PREFILLS',
  'HAP_MAX_STREAM_QUEUE',
  'HAP_PEER_REFRESH_MS',
  'HAP_DECODE_POLL_MS',
]);

// pods lists every pod template: {owner, namespace, labels, spec}.
function pods(objs) {
  const out = [];
  for (const o of objs) {
    const ns = (o.metadata && o.metadata.namespace) || "";
    if (o.kind === "Pod") {
      out.push({ owner: `Pod/${o.metadata.name}`, namespace: ns, labels: o.metadata.labels || {}, spec: o.spec, obj: o });
    } else if (WORKLOAD_KINDS.has(o.kind) && o.spec && o.spec.template) {
      const t = o.spec.template;
      out.push({
        owner: `${o.kind}/${o.metadata.name}`, namespace: ns,
        labels: (t.metadata && t.metadata.labels) || {}, spec: t.spec, obj: o,
      });
    }
  }
  return out;
}

function containers(pod) {
  return [...(pod.spec.initContainers || []), ...(pod.spec.containers || [])];
}

// matches evaluates a LabelSelector (matchLabels + matchExpressions) against labels.
function matches(selector, labels) {
  if (!selector) return false;
  for (const [k, v] of Object.entries(selector.matchLabels || {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of selector.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const v = labels[e.key];
    if (e.operator === "In" && !(has && e.values.includes(v))) return false;
    if (e.operator === "NotIn" && has && e.values.includes(v)) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

// A Service's selector is a plain map.
function selects(map, labels) {
  return Object.keys(map || {}).length > 0 && Object.entries(map).every(([k, v]) => labels[k] === v);
}

function componentOf(pod) {
  return pod.labels[COMPONENT] || pod.owner;
}

// --- checks --------------------------------------------------------------------------------

// Every container requests CPU and memory.
function checkRequests(objs) {
  const errs = [];
  for (const p of pods(objs)) {
    for (const c of containers(p)) {
      const r = (c.resources && c.resources.requests) || {};
      if (r.cpu === undefined || r.memory === undefined) {
        errs.push(`${p.owner} container ${c.name}: no cpu/memory requests`);
      }
    }
  }
  return errs;
}

// Images carry an explicit tag other than latest (a digest alone is not a readable pin).
function checkImages(objs) {
  const errs = [];
  for (const p of pods(objs)) {
    for (const c of containers(p)) {
      const ref = String(c.image || "").split("@")[0];
      const last = ref.split("/").pop();
      const tag = last.includes(":") ? last.split(":").pop() : "";
      if (!tag) errs.push(`${p.owner} container ${c.name}: image ${c.image} has no tag`);
      else if (tag === "latest") errs.push(`${p.owner} container ${c.name}: image ${c.image} uses latest`);
    }
  }
  return errs;
}

// GPUs exactly where expected: expected maps a component to its GPU count; nowhere else.
function checkGpus(objs, expected, resourceName = "nvidia.com/gpu") {
  const errs = [];
  const seen = {};
  for (const p of pods(objs)) {
    for (const c of containers(p)) {
      const res = c.resources || {};
      const limit = (res.limits || {})[resourceName];
      const request = (res.requests || {})[resourceName];
      if (request !== undefined && String(request) !== String(limit)) {
        errs.push(`${p.owner}: ${resourceName} request ${request} without an equal limit`);
      }
      const comp = componentOf(p);
      if (limit !== undefined) {
        seen[comp] = Number(limit);
        // The CPU image has no CUDA backend: a GPU given to it is wasted.
        if (SERVICES.includes(comp) && !/cuda/.test(String(c.image))) {
          errs.push(`${p.owner}: ${resourceName} limit but a non-CUDA image ${c.image}`);
        }
      }
    }
  }
  for (const [comp, n] of Object.entries(seen)) {
    if (expected[comp] === undefined) errs.push(`${comp}: ${n} ${resourceName} but none was configured`);
    else if (expected[comp] !== n) errs.push(`${comp}: ${n} ${resourceName}, configured ${expected[comp]}`);
  }
  for (const [comp, n] of Object.entries(expected)) {
    if (seen[comp] === undefined) errs.push(`${comp}: configured ${n} ${resourceName}, none rendered`);
  }
  return errs;
}

// Probe ports are ports the container opens (numbers or names); HAP services have all three
// probes; HAP_PORT agrees with the grpc port and HAP_OPENAI_PORT with the openai port (both or
// neither); integer variables are integers.
function checkProbes(objs) {
  const errs = [];
  for (const p of pods(objs)) {
    for (const c of containers(p)) {
      const ports = c.ports || [];
      const numbers = new Set(ports.map((x) => x.containerPort));
      const names = new Set(ports.map((x) => x.name).filter(Boolean));
      for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const probe = c[kind];
        if (!probe) {
          if (SERVICES.includes(componentOf(p))) errs.push(`${p.owner}: no ${kind}`);
          continue;
        }
        const action = probe.grpc || probe.tcpSocket || probe.httpGet;
        if (!action) continue; // exec
        const port = action.port;
        const ok = typeof port === "number" ? numbers.has(port) : names.has(port);
        if (!ok) errs.push(`${p.owner} ${c.name} ${kind}: port ${port} is not a container port`);
      }
      const env = Object.fromEntries((c.env || []).filter((e) => "value" in e).map((e) => [e.name, e.value]));
      for (const [k, v] of Object.entries(env)) {
        if (INTEGER_ENV.has(k) && !/^[0-9]+$/.test(String(v))) errs.push(`${p.owner}: ${k}=${v} is not an integer`);
      }
      const grpc = ports.find((x) => x.name === "grpc");
      if (env.HAP_PORT !== undefined && (!grpc || String(grpc.containerPort) !== String(env.HAP_PORT))) {
        errs.push(`${p.owner}: HAP_PORT ${env.HAP_PORT} is not the grpc container port`);
      }
      const openai = ports.find((x) => x.name === "openai");
      if (env.HAP_OPENAI_PORT !== undefined && (!openai || String(openai.containerPort) !== String(env.HAP_OPENAI_PORT))) {
        errs.push(`${p.owner}: HAP_OPENAI_PORT ${env.HAP_OPENAI_PORT} is not the openai container port`);
      } else if (openai && env.HAP_OPENAI_PORT === undefined) {
        errs.push(`${p.owner}: an openai container port but no HAP_OPENAI_PORT`);
      }
    }
  }
  return errs;
}

// Each Service selects pods, those of one component, and targets ports they open.
function checkServices(objs) {
  const errs = [];
  const all = pods(objs);
  for (const s of objs.filter((o) => o.kind === "Service")) {
    const ns = s.metadata.namespace || "";
    const picked = all.filter((p) => p.namespace === ns && p.obj.kind !== "Pod" && selects(s.spec.selector, p.labels));
    if (picked.length === 0) {
      errs.push(`Service/${s.metadata.name}: its selector matches no pod template`);
      continue;
    }
    const comps = new Set(picked.map(componentOf));
    if (comps.size !== 1) errs.push(`Service/${s.metadata.name}: selects several components (${[...comps]})`);
    const svcComp = (s.metadata.labels || {})[COMPONENT];
    if (svcComp && !comps.has(svcComp)) errs.push(`Service/${s.metadata.name}: labelled ${svcComp}, selects ${[...comps]}`);
    for (const port of s.spec.ports || []) {
      const target = port.targetPort === undefined ? port.port : port.targetPort;
      for (const p of picked) {
        const cports = (p.spec.containers || []).flatMap((c) => c.ports || []);
        const ok = typeof target === "number"
          ? cports.some((x) => x.containerPort === target)
          : cports.some((x) => x.name === target);
        if (!ok) errs.push(`Service/${s.metadata.name} port ${port.name}: ${p.owner} has no port ${target}`);
      }
    }
  }
  return errs;
}

// PDBs and HPAs point at existing workloads; an HPA's Deployment leaves replicas to it.
function checkPdbHpa(objs) {
  const errs = [];
  const all = pods(objs);
  for (const b of objs.filter((o) => o.kind === "PodDisruptionBudget")) {
    const picked = all.filter((p) => p.obj.kind !== "Pod" && matches(b.spec.selector, p.labels));
    if (picked.length !== 1) errs.push(`PodDisruptionBudget/${b.metadata.name}: selects ${picked.length} workloads`);
  }
  for (const h of objs.filter((o) => o.kind === "HorizontalPodAutoscaler")) {
    const ref = h.spec.scaleTargetRef;
    const target = objs.find((o) => o.kind === ref.kind && o.metadata.name === ref.name);
    if (!target) errs.push(`HorizontalPodAutoscaler/${h.metadata.name}: no ${ref.kind}/${ref.name}`);
    else if (target.spec.replicas !== undefined) {
      errs.push(`HorizontalPodAutoscaler/${h.metadata.name}: ${ref.kind}/${ref.name} also sets replicas`);
    }
  }
  return errs;
}

// A ServiceMonitor's selector picks Services with the endpoint's port.
function checkServiceMonitors(objs) {
  const errs = [];
  for (const m of objs.filter((o) => o.kind === "ServiceMonitor")) {
    const svcs = objs.filter((o) => o.kind === "Service" && matches(m.spec.selector, o.metadata.labels || {}));
    const comps = new Set(svcs.map((s) => (s.metadata.labels || {})[COMPONENT]));
    for (const c of SERVICES) if (!comps.has(c)) errs.push(`ServiceMonitor/${m.metadata.name}: does not select the ${c} Service`);
    for (const e of m.spec.endpoints || []) {
      for (const s of svcs) {
        if (!(s.spec.ports || []).some((p) => p.name === e.port)) {
          errs.push(`ServiceMonitor/${m.metadata.name}: Service/${s.metadata.name} has no port ${e.port}`);
        }
      }
    }
  }
  return errs;
}

// NetworkPolicies: each selects pods; every HAP service pod is covered by an Ingress policy;
// encoder's and decode's gRPC ports admit exactly the prefill pods; nothing but the front door's
// gRPC and OpenAI HTTP ports (and /metrics) admits peers from outside the release's pods, and
// those two front-door ports admit the same peers.
function checkNetworkPolicies(objs, { required }) {
  const errs = [];
  const all = pods(objs).filter((p) => p.obj.kind !== "Pod" || p.labels[COMPONENT] === "test");
  const policies = objs.filter((o) => o.kind === "NetworkPolicy");
  if (required && policies.length === 0) return ["no NetworkPolicy rendered"];
  const portOf = (pod, port) => {
    const cports = (pod.spec.containers || []).flatMap((c) => c.ports || []);
    const found = cports.find((x) => (typeof port === "number" ? x.containerPort === port : x.name === port));
    return found ? found.name || String(found.containerPort) : null;
  };
  // For every (pod, named port): the peers rules admit.
  const admitted = {}; // `${component}:${portName}` -> [peer descriptions]
  for (const np of policies) {
    const ns = np.metadata.namespace || "";
    const targets = all.filter((p) => p.namespace === ns && matches(np.spec.podSelector, p.labels));
    if (targets.length === 0) errs.push(`NetworkPolicy/${np.metadata.name}: selects no pod`);
    const npComp = (np.metadata.labels || {})[COMPONENT];
    for (const t of targets) {
      if (npComp && componentOf(t) !== npComp) {
        errs.push(`NetworkPolicy/${np.metadata.name}: labelled ${npComp} but selects ${t.owner}`);
      }
    }
    if (!(np.spec.policyTypes || ["Ingress"]).includes("Ingress")) continue;
    for (const rule of np.spec.ingress || []) {
      for (const t of targets) {
        const cports = (t.spec.containers || []).flatMap((c) => c.ports || []);
        const ports = rule.ports && rule.ports.length
          ? rule.ports.map((x) => portOf(t, x.port)).filter(Boolean)
          : cports.map((x) => x.name || String(x.containerPort));
        for (const portName of ports) {
          const key = `${componentOf(t)}:${portName}`;
          admitted[key] = admitted[key] || [];
          if (!rule.from || rule.from.length === 0) {
            admitted[key].push("anyone");
            continue;
          }
          for (const peer of rule.from) {
            if (peer.ipBlock || peer.namespaceSelector) {
              admitted[key].push("outside the release");
            } else {
              const srcs = all.filter((p) => p.namespace === ns && matches(peer.podSelector, p.labels));
              if (srcs.length === 0) admitted[key].push("a selector matching no pod");
              for (const s of srcs) admitted[key].push(componentOf(s));
            }
          }
        }
      }
    }
  }
  if (policies.length === 0) return errs;
  const covered = new Set();
  for (const np of policies) {
    for (const p of all) if (matches(np.spec.podSelector, p.labels)) covered.add(componentOf(p));
  }
  for (const c of SERVICES) {
    if (all.some((p) => componentOf(p) === c) && !covered.has(c)) errs.push(`${c}: no NetworkPolicy selects its pods`);
  }
  for (const c of ["encoder", "decode"]) {
    const peers = [...new Set(admitted[`${c}:grpc`] || [])];
    if (peers.length !== 1 || peers[0] !== "prefill") {
      errs.push(`${c} gRPC port admits [${peers}], want exactly [prefill]`);
    }
  }
  for (const [key, peers] of Object.entries(admitted)) {
    const [comp, port] = key.split(":");
    const outside = peers.filter((x) => x === "anyone" || x === "outside the release");
    if (outside.length && !(comp === "prefill" && ["grpc", "openai"].includes(port)) && port !== "metrics") {
      errs.push(`${comp} port ${port} admits ${outside[0]}: only the front door may`);
    }
  }
  const servesOpenai = all.some((p) => componentOf(p) === "prefill" &&
    (p.spec.containers || []).some((c) => (c.ports || []).some((x) => x.name === "openai")));
  if (servesOpenai) {
    const set = (k) => [...new Set(admitted[k] || [])].sort().join(",");
    if (set("prefill:openai") !== set("prefill:grpc")) {
      errs.push(`prefill OpenAI port admits [${set("prefill:openai")}], its gRPC port [${set("prefill:grpc")}]: want the same peers`);
    }
  }
  return errs;
}

// All checks; expectations: {gpus: {component: count}, networkPolicies: bool}.
function checkAll(objs, expect) {
  return {
    "every container requests cpu and memory": checkRequests(objs),
    "images pinned by a tag other than latest": checkImages(objs),
    "GPU limits exactly where configured": checkGpus(objs, expect.gpus || {}),
    "probe ports are container ports; integer env values": checkProbes(objs),
    "Service selectors match pod labels and ports": checkServices(objs),
    "PDB/HPA targets exist": checkPdbHpa(objs),
    "ServiceMonitor selects the services' metrics ports": checkServiceMonitors(objs),
    "NetworkPolicies select the intended pods and admit the intended peers":
      checkNetworkPolicies(objs, { required: expect.networkPolicies !== false }),
  };
}

module.exports = { checkAll, pods, matches };
