// The Helm chart, rendered offline by tools/helm-render (Go text/template + sprig, as Helm):
// the defaults, the GPU and CPU examples, a TLS case, the OpenAI HTTP API off and customised, and
// bearer-token authentication (tokens in a Secret the chart makes, or in an existing one) render; every object validates against the Kubernetes OpenAPI schemas with no unknown field;
// the semantic checks hold; the merged values pass values.schema.json, bad values fail it with
// the schema's message, and values the templates refuse fail the render with the chart's
// message; every value is documented; the committed renderings under helm/hap/examples/rendered
// are current (they are this renderer's own output, so that check catches staleness only).
//
// node chart_test.js --render BIN --chart DIR --cases DIR --source DIR --work DIR [--update]
"use strict";

const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const yaml = require("js-yaml");
const Ajv = require("ajv");
const { loadDocs, validateSchema } = require("./lib/k8s");
const { checkAll } = require("./lib/semantics");
const { Report } = require("./lib/report");

const args = {};
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === "--update") args.update = true;
  else args[a.replace(/^--/, "")] = process.argv[++i];
}
for (const need of ["render", "chart", "cases", "source", "work"]) {
  if (!args[need]) {
    console.error(`usage: node chart_test.js --render BIN --chart DIR --cases DIR --source DIR --work DIR [--update]`);
    process.exit(2);
  }
}
fs.mkdirSync(args.work, { recursive: true });

const RELEASE = "hap";
const NAMESPACE = "hap";
const SERVICES = ["encoder", "prefill", "decode"];
const report = new Report();

// render runs helm-render; returns {ok, manifests, values, notes, stderr}.
function render(name, valueFiles, extra = []) {
  const valuesOut = path.join(args.work, `${name}.values.json`);
  const notesOut = path.join(args.work, `${name}.NOTES.txt`);
  const argv = ["--name", RELEASE, "--namespace", NAMESPACE, "--values-out", valuesOut, "--notes-out", notesOut];
  for (const f of valueFiles) argv.push("-f", f);
  argv.push(...extra, args.chart);
  try {
    const manifests = execFileSync(args.render, argv, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    return {
      ok: true, manifests,
      values: JSON.parse(fs.readFileSync(valuesOut, "utf8")),
      notes: fs.readFileSync(notesOut, "utf8"),
    };
  } catch (e) {
    const values = fs.existsSync(valuesOut) ? JSON.parse(fs.readFileSync(valuesOut, "utf8")) : null;
    return { ok: false, stderr: String(e.stderr || e.message), values };
  }
}

// The values schema, as Helm applies it (draft-07) to the merged values.
const schema = JSON.parse(fs.readFileSync(path.join(args.chart, "values.schema.json"), "utf8"));
const ajv = new Ajv({ allErrors: true, strict: false });
const validateValues = ajv.compile(schema);
function schemaErrors(values) {
  if (validateValues(values)) return [];
  return validateValues.errors.map((e) => {
    const extra = e.params && e.params.additionalProperty ? ` '${e.params.additionalProperty}'` : "";
    return `${e.instancePath || "/"} ${e.message}${extra}`;
  });
}

// `# expect: ...` in a case file's header.
function expectation(file) {
  const m = fs.readFileSync(file, "utf8").match(/^# expect: (.*)$/m);
  if (!m) throw new Error(`${file} has no '# expect:' line`);
  return m[1].trim();
}

// --- Every value documented ------------------------------------------------------------------
report.run("every value in values.yaml is documented with ## @param (and every @param exists)", () => {
  const text = fs.readFileSync(path.join(args.chart, "values.yaml"), "utf8");
  const values = yaml.load(text);
  const params = [...text.matchAll(/^\s*## @param (\S+) \S/gm)].map((m) => m[1]);
  const errs = [];
  const leaves = [];
  (function walk(v, at) {
    const isMap = v && typeof v === "object" && !Array.isArray(v);
    if (isMap && Object.keys(v).length > 0) {
      for (const [k, e] of Object.entries(v)) walk(e, at ? `${at}.${k}` : k);
    } else {
      leaves.push(at);
    }
  })(values, "");
  for (const leaf of leaves) {
    if (!params.some((p) => leaf === p || leaf.startsWith(`${p}.`))) errs.push(`undocumented: ${leaf}`);
  }
  for (const p of params) {
    let v = values;
    for (const k of p.split(".")) v = v && typeof v === "object" ? v[k] : undefined;
    if (v === undefined) errs.push(`@param ${p} names no value`);
  }
  if (new Set(params).size !== params.length) errs.push("a value is documented twice");
  return errs;
});

report.run("Chart.yaml appVersion is the CMake project version (the default image tag)", () => {
  const chart = yaml.load(fs.readFileSync(path.join(args.chart, "Chart.yaml"), "utf8"));
  const cmake = fs.readFileSync(path.join(args.source, "CMakeLists.txt"), "utf8");
  const m = cmake.match(/project\(\s*\w+\s+VERSION\s+([0-9.]+)/);
  return m && m[1] === String(chart.appVersion) ? [] : [`appVersion ${chart.appVersion}, CMake ${m && m[1]}`];
});

// --- The good cases -------------------------------------------------------------------------
const examples = path.join(args.chart, "examples");
const cases = [
  {name: 'default', files: [], golden: true},
  {name: 'gpu', files: [path.join(examples, 'values-gpu.yaml')], golden: true},
  {name: 'cpu', files: [path.join(examples, 'values-cpu.yaml')], golden: true},
  {name: 'tls', files: [path.join(args.cases, 'values-tls.yaml')]},
  {name: 'openai-off', files: [], extra: ['--set', 'openai.enabled=false']},
  {name: 'kv-bf16', files: [], extra: ['--set', 'kvCache.dtype=bf16']},
  {
    name: 'decode-gpu',
    files: [],
    extra: ['--set', 'decode.gpu.count=1', '--set', 'decode.image.flavor=cuda']
  },
  {
    name: 'decode-graphs-off',
    files: [],
    extra: [
      '--set', 'decode.gpu.count=1', '--set', 'decode.image.flavor=cuda', '--set',
      'decode.gpu.graphs=false'
    ]
  },
  {name: 'openai-custom', files: [path.join(args.cases, 'values-openai-custom.yaml')]},
  {name: 'auth', files: [path.join(args.cases, 'values-auth.yaml')]},
  {name: 'auth-existing', files: [path.join(args.cases, 'values-auth-existing.yaml')]},
];

const byKind = (objs, kind) => objs.filter((o) => o.kind === kind);
const named = (objs, kind, name) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const container = (dep) => dep.spec.template.spec.containers[0];
const envOf = (c) => Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}

// Checks for every case: the front door's peer addresses and the OTLP endpoint name rendered
// Services and their ports; the test pod asks the front door's Service.
function wiring(objs, values) {
  const errs = [];
  const svcPort = (host, port) => {
    const name = host.split(".")[0];
    const svc = named(objs, "Service", name);
    if (!svc) return `no Service ${name}`;
    return svc.spec.ports.some((p) => p.port === Number(port)) ? null : `Service ${name} has no port ${port}`;
  };
  const prefill = named(objs, "Deployment", `${RELEASE}-prefill`);
  const env = envOf(container(prefill));
  for (const k of ["HAP_ENCODER_ADDR", "HAP_DECODE_ADDR"]) {
    const [host, port] = String(env[k]).split(":");
    const e = svcPort(host, port);
    if (e) errs.push(`${k}=${env[k]}: ${e}`);
  }
  // The front door dials its peers' headless Services: their names resolve to every pod, so
  // gRPC's round_robin spreads calls over the replicas (a ClusterIP is one connection, one pod).
  for (const [k, c] of [["HAP_ENCODER_ADDR", "encoder"], ["HAP_DECODE_ADDR", "decode"]]) {
    expect(env[k].startsWith(`${RELEASE}-${c}-headless.`), `${k} is not ${c}'s headless Service`);
    const svc = named(objs, "Service", `${RELEASE}-${c}-headless`);
    expect(svc.spec.clusterIP === "None", `${RELEASE}-${c}-headless is not headless`);
    const plain = named(objs, "Service", `${RELEASE}-${c}`);
    expect(JSON.stringify(svc.spec.selector) === JSON.stringify(plain.spec.selector),
           `${RELEASE}-${c}-headless selects other pods than ${RELEASE}-${c}`);
  }
  for (const c of SERVICES) {
    const e = envOf(container(named(objs, "Deployment", `${RELEASE}-${c}`)));
    if (values.tracing.enabled) {
      const m = String(e.OTEL_EXPORTER_OTLP_ENDPOINT).match(/^https?:\/\/([^:/]+):(\d+)$/);
      if (!m) errs.push(`${c}: OTEL_EXPORTER_OTLP_ENDPOINT=${e.OTEL_EXPORTER_OTLP_ENDPOINT}`);
      else if (values.otelCollector.enabled && !values.tracing.endpoint) {
        const err = svcPort(m[1], m[2]);
        if (err) errs.push(`${c} OTLP endpoint: ${err}`);
      }
    } else if (e.OTEL_EXPORTER_OTLP_ENDPOINT) {
      errs.push(`${c}: tracing is off but OTEL_EXPORTER_OTLP_ENDPOINT is set`);
    }
    expect(e.HAP_MODEL_DIR === `${values.model.mountPath}/${values.model.path}`, `${c}: HAP_MODEL_DIR ${e.HAP_MODEL_DIR}`);
    // Prefill sends the KV cache in the dtype decode's pool holds: one value sets both.
    expect(e.HAP_KV_DTYPE === (c === "encoder" ? undefined : values.kvCache.dtype),
      `${c}: HAP_KV_DTYPE ${e.HAP_KV_DTYPE}, kvCache.dtype ${values.kvCache.dtype}`);
    // The KV handover on the device: a switch of hap-prefill on a GPU only.
    const handover =
        c === 'prefill' && values.prefill.gpu.count > 0 ? values.prefill.gpu.kvHandover : undefined;
    expect(
        e.HAP_KV_HANDOVER === handover,
        `${c}: HAP_KV_HANDOVER ${e.HAP_KV_HANDOVER}, want ${handover}`);
    // Decode steps as CUDA graphs: a switch of hap-decode on a GPU only.
    const graphs = c === 'decode' && values.decode.gpu.count > 0 ?
        (values.decode.gpu.graphs ? 'on' : 'off') :
        undefined;
    expect(
        e.HAP_DECODE_GRAPHS === graphs,
        `${c}: HAP_DECODE_GRAPHS ${e.HAP_DECODE_GRAPHS}, want ${graphs}`);
  }
  const test = byKind(objs, "Pod").find((p) => (p.metadata.annotations || {})["helm.sh/hook"] === "test");
  if (!test) return [...errs, "no helm test pod"];
  const targs = test.spec.containers[0].args;
  const [host, port] = targs[targs.indexOf("--server") + 1].split(":");
  const e = svcPort(host, port);
  if (e) errs.push(`helm test --server: ${e}`);
  expect(host.startsWith(`${RELEASE}-prefill.`), "helm test does not call the front door");
  expect(test.spec.containers[0].command.join(" ") === "hapctl generate", "helm test does not run hapctl generate");
  expect(test.spec.containers[0].image === container(prefill).image, "helm test runs another image than prefill");
  return errs;
}

// The OpenAI-compatible HTTP API of the front door: with openai.enabled, prefill alone gets
// HAP_OPENAI_PORT, a container port `openai` and the same port on its Service (targeted by name),
// admitted by its NetworkPolicy beside gRPC, and NOTES.txt shows a curl call; the probes stay
// gRPC health checks. Without it, none of them. Returns the prefill Deployment's env.
function openaiWiring(objs, r, { port, enabled = true, model = undefined }) {
  const errs = [];
  for (const c of SERVICES) {
    const k = container(named(objs, "Deployment", `${RELEASE}-${c}`));
    const env = envOf(k);
    const cport = (k.ports || []).find((p) => p.name === "openai");
    const sport = named(objs, "Service", `${RELEASE}-${c}`).spec.ports.find((p) => p.name === "openai");
    if (c !== "prefill" || !enabled) {
      if (env.HAP_OPENAI_PORT !== undefined || env.HAP_SERVED_MODEL_NAME !== undefined) errs.push(`${c}: HAP_OPENAI_PORT/HAP_SERVED_MODEL_NAME set`);
      if (cport) errs.push(`${c}: container port openai`);
      if (sport) errs.push(`${c}: Service port openai`);
      continue;
    }
    if (env.HAP_OPENAI_PORT !== String(port)) errs.push(`prefill: HAP_OPENAI_PORT=${env.HAP_OPENAI_PORT}, want "${port}"`);
    if (env.HAP_SERVED_MODEL_NAME !== model) errs.push(`prefill: HAP_SERVED_MODEL_NAME=${env.HAP_SERVED_MODEL_NAME}, want ${model}`);
    if (!cport || cport.containerPort !== port || cport.protocol !== "TCP") errs.push(`prefill: container port openai ${JSON.stringify(cport)}`);
    if (!sport || sport.port !== port || sport.targetPort !== "openai" || sport.appProtocol !== "http") {
      errs.push(`prefill Service: port openai ${JSON.stringify(sport)}`);
    }
    // grpc.health.v1 on the gRPC port, or with TLS on the plaintext health-check port.
    const healthAt = r.values.tls.enabled ? r.values.probes.healthPort : r.values.prefill.port;
    for (const p of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const probe = k[p];
      if (!probe.grpc || probe.grpc.port !== healthAt) errs.push(`prefill ${p} no longer checks gRPC health on port ${healthAt}`);
    }
  }
  const np = named(objs, "NetworkPolicy", `${RELEASE}-prefill`);
  if (np) {
    const rule = np.spec.ingress.find((x) => (x.ports || []).some((p) => p.port === "grpc"));
    const has = rule.ports.some((p) => p.port === "openai");
    if (has !== enabled) errs.push(`prefill NetworkPolicy: openai port ${has ? "admitted" : "missing"} beside gRPC`);
  }
  const curl = r.notes.includes(`/v1/chat/completions`) && r.notes.includes("data:image/");
  if (curl !== enabled) errs.push(`NOTES.txt ${curl ? "shows" : "lacks"} the /v1/chat/completions example`);
  if (enabled && !r.notes.includes(`curl -s http://127.0.0.1:${port}/v1/chat/completions`)) errs.push("NOTES.txt curl not on openai.port");
  return errs;
}

// Bearer-token authentication at the front door: with auth.enabled, prefill alone gets
// HAP_AUTH_TOKENS_FILE (in the mounted Secret) and HAP_AUTH_MAX_CONCURRENT_PER_CLIENT, the Secret
// mounted read-only as a directory (a subPath would never see it change), the helm test reads its
// client's token from the same Secret, NOTES.txt says how to call; the tokens appear in the Secret
// the chart creates and nowhere else. Without it, none of these.
function authWiring(objs, r, { enabled, secret, mountPath = "/etc/hap/auth", limit = 0, testClient, tokens = [] }) {
  const errs = [];
  for (const c of SERVICES) {
    const d = named(objs, "Deployment", `${RELEASE}-${c}`);
    const k = container(d);
    const env = envOf(k);
    const mount = (k.volumeMounts || []).find((m) => m.name === "auth");
    const vol = (d.spec.template.spec.volumes || []).find((v) => v.name === "auth");
    if (c !== "prefill" || !enabled) {
      if (env.HAP_AUTH_TOKENS_FILE !== undefined || env.HAP_AUTH_MAX_CONCURRENT_PER_CLIENT !== undefined) errs.push(`${c}: HAP_AUTH_* set`);
      if (mount || vol) errs.push(`${c}: an auth volume`);
      continue;
    }
    if (env.HAP_AUTH_TOKENS_FILE !== `${mountPath}/tokens`) errs.push(`prefill: HAP_AUTH_TOKENS_FILE=${env.HAP_AUTH_TOKENS_FILE}`);
    if (env.HAP_AUTH_MAX_CONCURRENT_PER_CLIENT !== String(limit)) errs.push(`prefill: HAP_AUTH_MAX_CONCURRENT_PER_CLIENT=${env.HAP_AUTH_MAX_CONCURRENT_PER_CLIENT}, want ${limit}`);
    if (!mount || mount.mountPath !== mountPath || !mount.readOnly || mount.subPath) errs.push(`prefill: auth mount ${JSON.stringify(mount)}`);
    if (!vol || !vol.secret || vol.secret.secretName !== secret ||
        JSON.stringify(vol.secret.items) !== JSON.stringify([{ key: "tokens", path: "tokens" }])) {
      errs.push(`prefill: auth volume ${JSON.stringify(vol)}`);
    }
  }
  const test = byKind(objs, "Pod").find((p) => (p.metadata.annotations || {})["helm.sh/hook"] === "test");
  const targs = test.spec.containers[0].args;
  const tmount = (test.spec.containers[0].volumeMounts || []).find((m) => m.name === "auth");
  const tvol = (test.spec.volumes || []).find((v) => v.name === "auth");
  if (enabled) {
    if (targs[targs.indexOf("--token-file") + 1] !== `${mountPath}/tokens` || targs[targs.indexOf("--token-client") + 1] !== testClient) {
      errs.push(`helm test: ${targs.join(" ")}`);
    }
    if (!tmount || tmount.mountPath !== mountPath || !tmount.readOnly || !tvol || tvol.secret.secretName !== secret) {
      errs.push("helm test: the tokens Secret is not mounted read-only");
    }
  } else if (targs.includes("--token-file") || tmount || tvol) {
    errs.push("helm test: a token without auth.enabled");
  }
  const secrets = byKind(objs, "Secret");
  const made = named(objs, "Secret", `${RELEASE}-auth`);
  if (enabled && tokens.length > 0) {
    if (!made || made.type !== "Opaque" || Object.keys(made.data).join() !== "tokens") errs.push(`no Secret ${RELEASE}-auth with the key tokens`);
    else {
      const lines = Buffer.from(made.data.tokens, "base64").toString("utf8").split("\n").filter((l) => l && !l.startsWith("#"));
      const want = tokens.map((t) => `${t.client}:${t.token}`);
      if (JSON.stringify(lines) !== JSON.stringify(want)) errs.push(`Secret tokens: ${JSON.stringify(lines)}`);
    }
    if (secret !== `${RELEASE}-auth`) errs.push(`prefill mounts ${secret}, the chart made ${RELEASE}-auth`);
  } else if (secrets.length > 0) {
    errs.push(`Secrets rendered: ${secrets.map((x) => x.metadata.name).join(",")}`);
  }
  for (const o of objs.filter((x) => x.kind !== "Secret")) {
    for (const t of tokens) if (JSON.stringify(o).includes(t.token)) errs.push(`${o.kind}/${o.metadata.name} holds a token`);
  }
  for (const t of tokens) if (r.notes.includes(t.token)) errs.push("NOTES.txt shows a token");
  const on = r.notes.includes("Authentication is on") && r.notes.includes(`Authorization: Bearer`) && r.notes.includes("--token-file");
  if (on !== enabled) errs.push(`NOTES.txt ${on ? "says" : "does not say"} authentication is on`);
  if (!enabled && !r.notes.includes("Authentication is off")) errs.push("NOTES.txt does not say authentication is off");
  if (enabled && !r.notes.includes(secret)) errs.push("NOTES.txt does not name the tokens Secret");
  return errs;
}

const specific = {
  'auth'(objs, r) {
    const tokens = yaml.load(fs.readFileSync(path.join(args.cases, "values-auth.yaml"), "utf8")).auth.tokens;
    const errs = authWiring(objs, r, { enabled: true, secret: `${RELEASE}-auth`, limit: 2, testClient: "alice", tokens });
    expect(r.notes.includes("Each client may have 2 requests in flight"), "NOTES.txt does not give the per-client limit");
    expect(r.notes.includes("tokens cross the network in clear"), "NOTES.txt does not warn that tokens travel in clear without TLS");
    return [...errs, ...openaiWiring(objs, r, { port: 8000 })];
  },
  'auth-existing'(objs, r) {
    return authWiring(objs, r, { enabled: true, secret: "hap-front-door-tokens", mountPath: "/var/run/hap-auth", testClient: "helm-test" });
  },
  default(objs, r) {
    const kinds = objs.map((o) => o.kind).sort().join(",");
    expect(kinds === "Deployment,Deployment,Deployment,NetworkPolicy,NetworkPolicy,NetworkPolicy,PersistentVolumeClaim," +
      "Pod,PodDisruptionBudget,PodDisruptionBudget,PodDisruptionBudget,Service,Service,Service,Service,Service,ServiceAccount", `kinds: ${kinds}`);
    const pvc = byKind(objs, "PersistentVolumeClaim")[0];
    for (const d of byKind(objs, "Deployment")) {
      const vol = d.spec.template.spec.volumes.find((v) => v.name === "model");
      expect(vol.persistentVolumeClaim.claimName === pvc.metadata.name && vol.persistentVolumeClaim.readOnly,
        `${d.metadata.name}: model volume is not the chart's claim, read-only`);
      expect(container(d).volumeMounts.find((m) => m.name === "model").readOnly, `${d.metadata.name}: model mount not read-only`);
      expect(container(d).startupProbe.grpc && container(d).readinessProbe.grpc && container(d).livenessProbe.grpc,
        `${d.metadata.name}: probes are not native gRPC`);
      // Without TLS the probes ask the gRPC port itself: no plaintext health port is opened.
      expect(["startupProbe", "readinessProbe", "livenessProbe"].every((p) => container(d)[p].grpc.port === container(d).ports[0].containerPort),
        `${d.metadata.name}: without TLS the probes must check the gRPC port`);
      expect(!(container(d).ports || []).some((p) => p.name === "health") && envOf(container(d)).HAP_HEALTH_PORT === undefined,
        `${d.metadata.name}: a plaintext health port without TLS`);
      expect(container(d).image === "hap-serve:0.1.0-cpu", `${d.metadata.name}: image ${container(d).image}`);
    }
    expect(r.notes.includes(`${RELEASE}-prefill.${NAMESPACE}.svc:50052`), "NOTES.txt does not name the front door");
    const errs = [...openaiWiring(objs, r, { port: 8000 }), ...authWiring(objs, r, { enabled: false })];
    expect(r.notes.includes(`port 8000, model\n"scenes-llava"`), "NOTES.txt does not give the model id (model.path's last element)");
    return errs;
  },
  'openai-off'(objs, r) {
    return openaiWiring(objs, r, { enabled: false });
  },
  'kv-bf16'(objs) {
    for (const c of ["prefill", "decode"]) {
      const env = envOf(container(named(objs, "Deployment", `${RELEASE}-${c}`)));
      expect(env.HAP_KV_DTYPE === "bf16", `${c}: HAP_KV_DTYPE ${env.HAP_KV_DTYPE}`);
    }
  },
  'decode-gpu'(objs) {
    const env = envOf(container(named(objs, 'Deployment', `${RELEASE}-decode`)));
    expect(
        env.HAP_DEVICE === 'cuda' && env.HAP_DECODE_GRAPHS === 'on',
        `decode: HAP_DEVICE ${env.HAP_DEVICE}, HAP_DECODE_GRAPHS ${env.HAP_DECODE_GRAPHS}`);
  },
  'decode-graphs-off'(objs) {
    const env = envOf(container(named(objs, 'Deployment', `${RELEASE}-decode`)));
    expect(env.HAP_DECODE_GRAPHS === 'off', `decode: HAP_DECODE_GRAPHS ${env.HAP_DECODE_GRAPHS}`);
  },
  'openai-custom'(objs, r) {
    const errs = openaiWiring(objs, r, { port: 8080, model: "llava-1.5-7b" });
    expect(r.notes.includes(`"llava-1.5-7b"`), "NOTES.txt does not give openai.servedModelName");
    expect(r.notes.includes("port-forward svc/hap-prefill 8080:8080"), "NOTES.txt port-forward is not on openai.port");
    expect(r.notes.includes("plain HTTP: tls.enabled covers the gRPC ports only"), "NOTES.txt does not say the HTTP API has no TLS");
    return errs;
  },
  gpu(objs) {
    for (const c of ["encoder", "prefill"]) {
      expect(named(objs, "HorizontalPodAutoscaler", `${RELEASE}-${c}`), `no HPA for ${c}`);
      expect(container(named(objs, "Deployment", `${RELEASE}-${c}`)).image === "registry.example.com/ml/hap-serve:0.1.0-cuda",
        `${c} does not run the CUDA image`);
    }
    const decode = named(objs, "Deployment", `${RELEASE}-decode`);
    expect(decode.spec.replicas === 3 && container(decode).image.endsWith(":0.1.0-cpu"), "decode: 3 replicas of the CPU image");
    expect(byKind(objs, "ServiceMonitor").length === 1, "no ServiceMonitor");
    expect(named(objs, "Deployment", `${RELEASE}-otel-collector`) && named(objs, "Deployment", `${RELEASE}-jaeger`),
      "collector and Jaeger are not deployed");
    const cfg = yaml.load(named(objs, "ConfigMap", `${RELEASE}-otel-collector`).data["config.yaml"]);
    expect(cfg.exporters.otlp.endpoint === `${RELEASE}-jaeger.${NAMESPACE}.svc:4317`, "collector does not export to Jaeger");
    expect(named(objs, "Service", `${RELEASE}-prefill`).spec.type === "LoadBalancer", "front door is not a LoadBalancer");
    expect(named(objs, "Service", `${RELEASE}-prefill`).spec.ports.some((p) => p.name === "openai" && p.port === 8000),
      "the LoadBalancer front door does not expose the OpenAI port");
    for (const c of ["encoder", "prefill", "decode"]) {
      expect(named(objs, "Service", `${RELEASE}-${c}`).spec.type === (c === "prefill" ? "LoadBalancer" : "ClusterIP"),
        `${c} Service type`);
    }
  },
  cpu(objs) {
    for (const d of byKind(objs, "Deployment")) {
      const vol = d.spec.template.spec.volumes.find((v) => v.name === "model");
      expect(vol.hostPath && vol.hostPath.path === "/srv/hap/models", `${d.metadata.name}: model is not the hostPath`);
    }
    expect(byKind(objs, "PersistentVolumeClaim").length === 0, "a claim is created although the model is a hostPath");
    const env = envOf(container(named(objs, "Deployment", `${RELEASE}-prefill`)));
    expect(env.HAP_FLOPS === "0.25" && env.HAP_RETAIN === undefined, "prefill budget should be HAP_FLOPS=0.25 alone");
    const np = named(objs, "NetworkPolicy", `${RELEASE}-prefill`);
    const from = np.spec.ingress[0].from;
    expect(from.length === 2 && from[0].namespaceSelector.matchLabels["hap-client"] === "true" &&
      from[1].podSelector.matchLabels["app.kubernetes.io/component"] === "test", "front door ingress is not restricted as configured");
    expect(np.spec.ingress[0].ports.map((p) => p.port).join(",") === "grpc,openai",
      "the front door's OpenAI port is not admitted from the same peers as gRPC");
  },
  tls(objs, r) {
    for (const c of SERVICES) {
      const d = named(objs, "Deployment", `${RELEASE}-${c}`);
      const k = container(d);
      const env = envOf(k);
      expect(env.HAP_TLS_CERT === "/etc/hap/tls/tls.crt" && env.HAP_TLS_KEY === "/etc/hap/tls/tls.key" &&
        env.HAP_TLS_CLIENT_CA === "/etc/hap/tls/ca.crt", `${c}: TLS variables`);
      // The kubelet's gRPC probe has no TLS: the probes ask the plaintext health-check port,
      // which the container opens, no Service exposes and no NetworkPolicy rule admits.
      const health = r.values.probes.healthPort;
      expect(env.HAP_HEALTH_PORT === String(health), `${c}: HAP_HEALTH_PORT=${env.HAP_HEALTH_PORT}, want "${health}"`);
      const hport = (k.ports || []).find((p) => p.name === "health");
      expect(hport && hport.containerPort === health && hport.protocol === "TCP", `${c}: container port health ${JSON.stringify(hport)}`);
      for (const p of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        expect(k[p].grpc && k[p].grpc.port === health && !k[p].tcpSocket,
          `${c} ${p}: not a native gRPC probe of the health port ${health}: ${JSON.stringify(k[p])}`);
      }
      for (const svc of byKind(objs, "Service")) {
        expect(!svc.spec.ports.some((p) => p.port === health || p.targetPort === "health" || p.targetPort === health),
          `Service/${svc.metadata.name} exposes the plaintext health port`);
      }
      for (const np of byKind(objs, "NetworkPolicy")) {
        for (const rule of np.spec.ingress || []) {
          expect((rule.ports || []).length > 0 && !rule.ports.some((p) => p.port === "health" || p.port === health),
            `NetworkPolicy/${np.metadata.name} admits the plaintext health port`);
        }
      }
      const vol = d.spec.template.spec.volumes.find((v) => v.name === "tls");
      expect(vol && vol.secret.secretName === `hap-${c}-tls`, `${c}: TLS secret volume`);
    }
    const env = envOf(container(named(objs, "Deployment", `${RELEASE}-prefill`)));
    expect(env.HAP_PEER_TLS_CA && env.HAP_PEER_TLS_CERT, "prefill has no peer TLS settings");
    const test = byKind(objs, "Pod")[0].spec.containers[0].args;
    expect(test.includes("--tls-ca") && test.includes("--tls-cert"), "helm test does not use TLS");
    expect(r.notes.includes(`in plaintext on port ${r.values.probes.healthPort} (probes.healthPort)`),
      "NOTES.txt does not say where the plaintext health checks are");
    return openaiWiring(objs, r, { enabled: false });
  },
};

for (const c of cases) {
  const r = render(c.name, c.files, c.extra);
  if (!report.check(`${c.name}: renders`, r.ok ? [] : [r.stderr.trim()])) continue;
  report.check(`${c.name}: merged values pass values.schema.json`, schemaErrors(r.values));
  const objs = loadDocs(r.manifests);
  report.check(`${c.name}: ${objs.length} objects validate against the Kubernetes OpenAPI schemas, no unknown fields`,
    objs.flatMap(validateSchema));
  const gpus = {};
  for (const s of SERVICES) if (r.values[s].gpu.count > 0) gpus[s] = r.values[s].gpu.count;
  for (const [name, errs] of Object.entries(checkAll(objs, { gpus, networkPolicies: r.values.networkPolicy.enabled }))) {
    report.check(`${c.name}: ${name}`, errs);
  }
  report.run(`${c.name}: addresses, endpoints and the helm test pod point at rendered Services`, () => wiring(objs, r.values));
  report.run(`${c.name}: case specifics`, () => specific[c.name](objs, r));
  // The committed renderings are written by this renderer (--update), so comparing against them
  // catches only staleness: a file that no longer matches the chart. What a rendering must contain
  // is checked above (schemas, checkAll, wiring, the case specifics), not by this comparison.
  if (c.golden) {
    const file = path.join(examples, "rendered", `${c.name}.yaml`);
    const header = `# helm template ${RELEASE} helm/hap -n ${NAMESPACE}` +
      `${c.files.map((f) => ` -f helm/hap/examples/${path.basename(f)}`).join("")}\n` +
      "# Generated by tests/deploy (node chart_test.js ... --update); do not edit.\n";
    const want = header + r.manifests;
    if (args.update) {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, want);
    }
    const have = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "";
    report.check(`${c.name}: helm/hap/examples/rendered/${c.name}.yaml is current (staleness only)`,
      have === want ? [] : ["stale or missing: run tests/deploy/update-rendered.sh and review the diff"]);
  }
}

// --- Values the schema must refuse, with its message ---------------------------------------
const caseFiles = fs.readdirSync(args.cases).sort();
for (const f of caseFiles.filter((x) => x.startsWith("schema-"))) {
  const want = expectation(path.join(args.cases, f));
  const r = render(f, [path.join(args.cases, f)]);
  report.run(`values.schema.json rejects ${f}: "${want}"`, () => {
    if (!r.values) throw new Error(`no merged values: ${r.stderr}`);
    const errs = schemaErrors(r.values);
    expect(errs.length > 0, "accepted");
    expect(errs.some((e) => e.includes(want)), `messages: ${errs.join("; ")}`);
  });
}

// --- Values the templates must refuse, with the chart's message ----------------------------
for (const f of caseFiles.filter((x) => x.startsWith("fail-"))) {
  const want = expectation(path.join(args.cases, f));
  const r = render(f, [path.join(args.cases, f)]);
  report.run(`the chart refuses ${f}: "${want}"`, () => {
    expect(!r.ok, "rendered");
    expect(/^Error: execution error at \(hap\/templates\/[^)]+\): /.test(r.stderr), `not a template failure: ${r.stderr}`);
    expect(r.stderr.includes(want), `message: ${r.stderr.trim()}`);
  });
}
report.run("the chart refuses openai.port equal to prefill.port (--set)", () => {
  const r = render("set-openai-port", [], ["--set", "openai.port=50052"]);
  expect(!r.ok && r.stderr.includes("openai.port 50052 is prefill.port too"), r.stderr || "rendered");
});
report.run("the chart refuses serviceAccount.create=false without a name (--set)", () => {
  const r = render("set-sa", [], ["--set", "serviceAccount.create=false"]);
  expect(!r.ok && r.stderr.includes("serviceAccount.name is required when serviceAccount.create is false"), r.stderr || "rendered");
});

report.finish();
