// Kubernetes objects checked offline: parse a multi-document YAML stream, validate each object
// against the OpenAPI schema of its kind (kubernetes-models, which validates with ajv), and
// reject fields the API does not know (the schemas allow them; a strict API server does not,
// and they are what a wrong nindent produces). Unknown fields are found from the models'
// TypeScript declarations, which list every field of every API type.
"use strict";

const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");

const MODULES = path.join(__dirname, "..", "node_modules");

// loadDocs parses a YAML stream into objects, dropping empty documents.
function loadDocs(text) {
  return yaml.loadAll(text).filter((d) => d !== null && d !== undefined);
}

// Module (without extension) that holds a kind's model, or null for kinds we cannot check.
function modelModule(apiVersion, kind) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

function describe(obj) {
  const name = obj && obj.metadata && obj.metadata.name;
  return `${obj && obj.kind}/${name}`;
}

// validateSchema returns a list of messages (empty when the object is valid).
function validateSchema(obj) {
  if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind) {
    return [`not a Kubernetes object: ${JSON.stringify(obj).slice(0, 80)}`];
  }
  const mod = modelModule(obj.apiVersion, obj.kind);
  let Model;
  try {
    Model = require(mod)[obj.kind];
  } catch (e) {
    return [`${describe(obj)}: no schema for ${obj.apiVersion} ${obj.kind}`];
  }
  if (typeof Model !== "function") return [`${describe(obj)}: no model class in ${mod}`];
  const errors = [];
  try {
    new Model(obj).validate();
  } catch (e) {
    errors.push(`${describe(obj)}: ${e.message}`);
  }
  if (!mod.startsWith("@kubernetes-models/prometheus-operator")) {
    for (const f of unknownFields(obj, typeFromFile(path.join(MODULES, `${mod}.d.ts`)), "")) {
      errors.push(`${describe(obj)}: unknown field ${f}`);
    }
  }
  return errors;
}

// --- Field lists from the .d.ts declarations -------------------------------------------------

const parsed = new Map(); // file -> {fields: {name: typeText}, imports: {Type: file}} | {alias: true}

function parseDts(file) {
  if (parsed.has(file)) return parsed.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = {};
  for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    const spec = m[2];
    imports[m[1]] = spec.startsWith(".")
      ? path.resolve(path.dirname(file), `${spec}.d.ts`)
      : path.join(MODULES, `${spec}.d.ts`);
  }
  const iface = text.match(/^export interface \w+( extends TypeMeta)? \{\n([\s\S]*?)\n\}$/m);
  let info;
  if (!iface) {
    info = { alias: true }; // a type alias (Quantity, IntOrString, Time, ...): a scalar
  } else {
    const fields = {};
    const lines = iface[2].split("\n");
    for (let i = 0; i < lines.length; i++) {
      const m = lines[i].match(/^ {4}"([^"]+)"\??: (.*?);?$/);
      if (!m) continue;
      let type = m[2];
      if (type.endsWith("{")) {
        // An inline type: a map ({[key: string]: T}) or something we treat as open.
        const body = [];
        while (++i < lines.length && !/^ {4}\}/.test(lines[i])) body.push(lines[i].trim());
        const map = body.length === 1 && body[0].match(/^\[key: string\]: (.*);$/);
        type = map ? { map: map[1] } : "any";
      }
      fields[m[1]] = type;
    }
    if (iface[1]) {
      fields.apiVersion = "string";
      fields.kind = "string";
    }
    info = { fields, imports };
  }
  parsed.set(file, info);
  return info;
}

function typeFromFile(file) {
  return fs.existsSync(file) ? { file } : "any";
}

// resolve turns a field's type text into {file} (an interface), {array: t}, {map: t} or "scalar".
function resolve(typeText, imports) {
  if (typeof typeText === "object" && typeText.map !== undefined) {
    return { map: resolve(typeText.map, imports) };
  }
  if (typeText === "any") return "any";
  const arr = typeText.match(/^Array<(.*)>$/);
  if (arr) return { array: resolve(arr[1], imports) };
  if (imports[typeText]) return typeFromFile(imports[typeText]);
  return "scalar";
}

// unknownFields lists the paths of fields the type does not declare.
function unknownFields(value, type, at) {
  const out = [];
  if (type === "any" || type === "scalar" || value === null || typeof value !== "object") return out;
  if (type.array) {
    if (Array.isArray(value)) value.forEach((v, i) => out.push(...unknownFields(v, type.array, `${at}[${i}]`)));
    return out;
  }
  if (type.map) {
    for (const [k, v] of Object.entries(value)) out.push(...unknownFields(v, type.map, `${at}.${k}`));
    return out;
  }
  const info = parseDts(type.file);
  if (info.alias || Array.isArray(value)) return out;
  for (const [k, v] of Object.entries(value)) {
    const where = at ? `${at}.${k}` : k;
    if (!(k in info.fields)) {
      out.push(where);
      continue;
    }
    out.push(...unknownFields(v, resolve(info.fields[k], info.imports), where));
  }
  return out;
}

module.exports = { loadDocs, validateSchema, describe };
