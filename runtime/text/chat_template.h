// Chat templates: renders a conversation through a model's own Hugging Face chat template, so the
// OpenAI-compatible API builds the same prompt text that transformers' apply_chat_template does.
//
// The template language is the subset of Jinja2 (3.1) that chat templates use, interpreted the
// way transformers configures it: trim_blocks and lstrip_blocks on, loop controls on, the
// `generation` tag, the globals raise_exception and strftime_now, and a `tojson` filter that
// writes json.dumps(ensure_ascii=False) text.
//
// Supported:
//   - text, {{ expr }}, {% stmt %}, {# comment #}, whitespace control {%- -%} {{- -}} {%+ +%};
//     a block or comment tag's newline is trimmed and the indentation before it stripped; the
//     template's one trailing newline is dropped (keep_trailing_newline off).
//   - statements: for/else/endfor (tuple targets, a trailing `if` filter, loop.index, index0,
//     revindex, revindex0, first, last, length, previtem, nextitem), if/elif/else/endif, set
//     (`set x = ...`, `set a, b = ...`, `set ns.x = ...`, `set x` ... `endset` capturing text),
//     generation/endgeneration (renders its body), break, continue.
//   - expressions: literals (strings with Python escapes, ints, floats, true/True, false/False,
//     none/None, lists, tuples as lists, dicts), variables, `a.b`, `a['b']`, `a[-1]`, slices
//     `a[1:]` `a[::-1]`, calls with keyword arguments, + - * / // % ** ~, unary - +, comparisons
//     (chained as in Python), and/or/not, in/not in, `is [not] test`, `x if c else y`, filters.
//   - filters: abs capitalize count d default first float int items join last length list lower
//     map reject rejectattr replace reverse safe select selectattr string title tojson trim upper.
//   - tests: defined undefined none boolean true false integer float number string mapping
//     iterable sequence callable even odd divisibleby lower upper in eq/equalto/== ne/!= lt/< le/<=
//     gt/> ge/>= sameas.
//   - methods: str strip lstrip rstrip upper lower title capitalize startswith endswith split
//     replace join; dict get items keys values. Globals: raise_exception, range, namespace,
//     dict, strftime_now.
//   - Values are JSON; Python semantics for truthiness, str() (None, True, 1.0, ['a']),
//     arithmetic and comparison. String methods and filters work on code points with Python's
//     Unicode rules: strip/split/trim take str.isspace() whitespace (U+3000, NBSP, ...),
//     upper/lower/title/capitalize use the full case mappings ("ß".upper() is "SS", a final Σ
//     lowers to ς). Jinja's default Undefined: renders empty, is falsy, iterates as
//     empty; an attribute or item of an undefined value is undefined too (Jinja would raise).
//   - Limits as Jinja's sandbox: range() of at most 100000 items; also at most 1M loop iterations,
//     64 MiB of output and 4M values made by expressions (list items, dict entries, 64-byte
//     pieces of strings) per render, and 200 levels of nesting.
// Not supported: macros, call/filter/raw blocks, include/import/extends, recursive loops,
// loop.cycle, *args/**kwargs, string % formatting, str.format. Dicts keep JSON's sorted key order
// (Python keeps insertion order), so iterating a dict or tojson of one lists keys sorted.
// Filters, tests and methods are looked up when used, so a template may name unsupported ones in
// branches that a conversation does not reach.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace hap {

namespace chat_template_internal {
struct Block;
}  // namespace chat_template_internal

class ChatTemplate {
 public:
  // Parses a Jinja chat template. InvalidArgument naming the line:column and what was expected on
  // a syntax error.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source, std::string origin);
  // LLaVA-1.5's conversation format as llava-hf ships it.
  static ChatTemplate Llava15();
  // The template of a Hugging Face model directory: chat_template.json's "chat_template" when that
  // file exists, else tokenizer_config.json's "chat_template" (a string, or a list of
  // {name, template} objects of which the one named "default" is taken), else Llava15(). A file
  // that exists but is not valid JSON, or a template that does not parse, is an error naming the
  // file.
  static absl::StatusOr<ChatTemplate> ForModelDir(const std::string& dir);

  // Renders `messages` (a JSON array of {"role": ..., "content": string or array of parts
  // {"type": "text", "text": ...} / {"type": "image"}}) with the variables messages,
  // add_generation_prompt, plus every key of `extra` (e.g. bos_token, eos_token; messages and
  // add_generation_prompt win over keys of the same name). Runtime errors (unknown filter,
  // calling a non-callable, raise_exception(...) in the template) are InvalidArgument with the
  // message and line ("<origin>: line L:C: <message>"). Const and safe to call from several
  // threads at once.
  absl::StatusOr<std::string> Render(const nlohmann::json& messages, bool add_generation_prompt,
                                     const nlohmann::json& extra = nlohmann::json::object()) const;

  // "chat_template.json", "tokenizer_config.json", "built-in LLaVA-1.5", or Parse's origin.
  const std::string& origin() const { return origin_; }
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;

  std::string origin_;
  std::string source_;
  std::shared_ptr<const chat_template_internal::Block> body_;  // immutable, shared by copies
};

}  // namespace hap
