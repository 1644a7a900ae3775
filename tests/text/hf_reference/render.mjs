// Renders chat templates with @huggingface/jinja (the interpreter of transformers.js'
// apply_chat_template), the reference chat_template_reference.py compares ChatTemplate with.
// usage: node render.mjs TEMPLATE_FILE CASES.json
//   CASES.json is a JSON list of {"messages": [...], "add_generation_prompt": bool,
//   "extra": {...}}.
//   Prints one JSON line per case: {"text": rendered} or {"error": message}; a template that does
//   not parse gives every case the parse error.
// As apply_chat_template: `new Template(source).render({messages, add_generation_prompt, ...})`;
// the special tokens (bos_token, eos_token, ...) come in "extra", as the C++ server passes them.
// render() itself supplies raise_exception, range, strftime_now and namespace. messages and
// add_generation_prompt win over keys of "extra" with the same name, as in ChatTemplate::Render.
import fs from "node:fs";
import { Template } from "@huggingface/jinja";

const [templatePath, casesPath] = process.argv.slice(2);
if (!templatePath || !casesPath) {
  console.error("usage: node render.mjs TEMPLATE_FILE CASES.json");
  process.exit(2);
}
const source = fs.readFileSync(templatePath, "utf8");
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));

const message = (e) => String(e && e.message !== undefined ? e.message : e);
let template = null;
let parseError = null;
try {
  template = new Template(source);
} catch (e) {
  parseError = `parse: ${message(e)}`;
}

const lines = cases.map((c) => {
  if (parseError !== null) return JSON.stringify({ error: parseError });
  try {
    const text = template.render({
      ...(c.extra ?? {}),
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt ?? false,
    });
    return JSON.stringify({ text });
  } catch (e) {
    return JSON.stringify({ error: message(e) });
  }
});
process.stdout.write(lines.join("\n") + (lines.length ? "\n" : ""));
