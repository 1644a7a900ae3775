// Unit tests for runtime/text/chat_template: the Jinja subset, transformers' whitespace rules,
// LLaVA-1.5 and other real template shapes, errors, and finding a model directory's template.
// Expected strings follow Jinja 3.1 as transformers configures it (checked against jinja2).
#include "runtime/text/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hap {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// A template, its variables as JSON ("messages" and "add_generation_prompt" go to Render's own
// arguments, every other key to `extra`), and the exact text it renders.
struct Case {
  const char* tmpl;
  const char* vars;
  const char* want;
};

absl::StatusOr<std::string> RenderWith(const ChatTemplate& t, const char* vars_text) {
  Json vars = Json::parse(vars_text);
  const Json messages = vars.value("messages", Json::array());
  const bool add_generation_prompt = vars.value("add_generation_prompt", false);
  vars.erase("messages");
  vars.erase("add_generation_prompt");
  return t.Render(messages, add_generation_prompt, vars);
}

void ExpectRenders(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tmpl);
    auto t = ChatTemplate::Parse(c.tmpl, "test");
    ASSERT_TRUE(t.ok()) << t.status();
    auto out = RenderWith(*t, c.vars);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.want);
  }
}

// Parses `tmpl` and renders it with `vars`; returns the error (OK if both succeeded).
absl::Status RenderError(const char* tmpl, const char* vars = "{}") {
  auto t = ChatTemplate::Parse(tmpl, "test");
  if (!t.ok()) return t.status();
  return RenderWith(*t, vars).status();
}

void ExpectError(const char* tmpl, const std::string& message_part, const char* vars = "{}") {
  SCOPED_TRACE(tmpl);
  const absl::Status s = RenderError(tmpl, vars);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(message_part), std::string::npos) << s;
}

const char* const kLlavaUserTurn =
    R"j({"add_generation_prompt": true, "messages": [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "What is shown?"}]}]})j";

TEST(ChatTemplateTest, Llava15RendersOneUserTurn) {
  const ChatTemplate t = ChatTemplate::Llava15();
  EXPECT_EQ(t.origin(), "built-in LLaVA-1.5");
  EXPECT_NE(t.source().find("{% generation %}"), std::string::npos);
  auto out = RenderWith(t, kLlavaUserTurn);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "USER: <image>\nWhat is shown? ASSISTANT:");
}

TEST(ChatTemplateTest, Llava15RendersTwoTurnsWithAnAssistantReply) {
  auto out = RenderWith(ChatTemplate::Llava15(), R"j({"add_generation_prompt": true, "messages": [
      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "A red car."}]},
      {"role": "user", "content": [{"type": "text", "text": "What color is it?"}]}]})j");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "USER: <image>\nWhat is shown? ASSISTANT: A red car. USER: What color is it? "
            "ASSISTANT:");
  // Without the generation prompt, and with a system turn (no role prefix, text only).
  out = RenderWith(ChatTemplate::Llava15(), R"j({"messages": [
      {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})j");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "Be brief. USER: Hi ");
}

TEST(ChatTemplateTest, Literals) {
  ExpectRenders({
      {R"j({{ 'a' }}{{ "b" }}{{ 'c' "d" }}{{ 'it\'s' }}{{ "tab\there" }}{{ '\x41\u00e9' }})j", "{}",
       "abcdit'stab\there"
       "A\xC3\xA9"},
      {"{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 1.0 }} {{ 2.50 }} {{ 1e3 }} {{ 0.1 + 0.2 }}", "{}",
       "42 -7 1000 1.0 2.5 1000.0 0.30000000000000004"},
      {"{{ 1e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1.5e-7 }} {{ 1e15 }}", "{}",
       "1e+16 1e-05 0.0001 1.5e-07 1000000000000000.0"},
      {"{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}", "{}",
       "True True False False None None"},
      {R"j({{ [1, 'a', none, true, 2.5] }} {{ {'j': {}, 'k': [1]} }} {{ [] }} {{ (1) }})j", "{}",
       "[1, 'a', None, True, 2.5] {'j': {}, 'k': [1]} [] 1"},
      {R"j({{ ["it's", 'say "hi"', 'a\nb'] }})j", "{}", R"j(["it's", 'say "hi"', 'a\nb'])j"},
      {"{{ {'a': {'b': 1}}}}", "{}", "{'a': {'b': 1}}"},
  });
}

TEST(ChatTemplateTest, VariablesAttributesAndSubscripts) {
  const char* vars =
      R"j({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                       {"role": "assistant", "content": "yo"}],
                          "bos_token": "<s>"})j";
  ExpectRenders({
      {"{{ bos_token }}|{{ messages[0].role }}|{{ messages[0]['role'] }}|{{ messages.1.content }}",
       vars, "<s>|user|user|yo"},
      {"{{ messages[-1].role }}|{{ messages[0]['content'][0].text }}|{{ messages[5] }}|{{ nope }}",
       vars, "assistant|hi||"},
      {"{{ messages[1:]|length }} {{ messages[:1][0].role }} {{ messages[::-1][0].role }}", vars,
       "1 user assistant"},
      {"{{ [1, 2, 3, 4, 5][1:4:2] }} {{ 'hello'[1:] }} {{ 'héllo'[::-1] }} {{ 'abc'[-1] }}", "{}",
       "[2, 4] ello olléh c"},
  });
}

TEST(ChatTemplateTest, Operators) {
  ExpectRenders({
      {"{{ 1 + 2 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }}",
       "{}", "3 -3 12 3.5 2.0 3 -4"},
      {"{{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 2 * 3 + 1 }} {{ 2 * (3 + 1) }}",
       "{}", "1 2 1024 64 7 8"},
      {"{{ 'ab' + 'cd' }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'x' ~ 1 ~ none ~ true ~ undefined_name "
       "}}",
       "{}", "abcd abab [1, 2] x1NoneTrue"},
      {"{{ True + 1 }} {{ 1.5 + 1 }} {{ -(3) }} {{ +2 }} {{ 10 - 2 - 3 }}", "{}", "2 2.5 -3 2 5"},
      {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'b' >= 'a' }} {{ 1 != 2 "
       "}}",
       "{}", "True False True True True True"},
      {"{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}", "{}",
       "True True True True"},
      {"{{ not 1 }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ [] or none }} {{ not x is defined }}", "{}",
       "False x y None True"},
      {"{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}]", "{}",
       "a b []"},
  });
}

TEST(ChatTemplateTest, Tests) {
  ExpectRenders({
      {"{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 1 is not none }}", "{}",
       "False True True True"},
      {"{{ 's' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ {} is mapping }} "
       "{{ [] is mapping }} {{ [] is iterable }} {{ 'x' is iterable }} {{ 3 is iterable }}",
       "{}", "True True True True False True True False"},
      {"{{ 'a' is equalto 'a' }} {{ 'a' is equalto('b') }} {{ 2 is eq 2 }}", "{}",
       "True False True"},
      {"{{ 3 is odd }} {{ 4 is even }} {{ 3 is even }} {{ 9 is divisibleby 3 }}", "{}",
       "True True False True"},
      {"{% for m in messages %}{{ m.content is string }}{% endfor %}",
       R"j({"messages": [{"content": "s"}, {"content": [{"type": "text"}]}]})j", "TrueFalse"},
  });
}

TEST(ChatTemplateTest, Filters) {
  const char* parts = R"j({"parts": [{"type": "image"}, {"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]})j";
  ExpectRenders({
      {"{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}", "{}",
       "x|hi|ABab"},
      // Python's Unicode whitespace and full case mappings.
      {"[{{ '\u3000\u00a0x\u2028 '|trim }}][{{ ' a\u3000b '.split() }}][{{ "
       "'\u00e9\u00e9'.strip('\u00e9') }}]",
       "{}", "[x][['a', 'b']][]"},
      {"{{ 'na\u00efve stra\u00dfe'|upper }} {{ '\u039f\u0394\u039f\u03a3'|lower }} "
       "{{ '\u00e9a b'|title }} {{ '\u00e9A'|capitalize }}",
       "{}",
       "NA\xC3\x8FVE STRASSE \xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82 \xC3\x89"
       "a B \xC3\x89"
       "a"},
      // Jinja's select/reject/map on none give nothing.
      {"[{{ none|selectattr('type')|list }}][{{ none|map(attribute='x')|list }}]", "{}",
       "[[]][[]]"},
      {"{{ 'hELLo wOrld'|capitalize }} {{ 'ab cd-ef (gh'|title }} {{ 'a-b'|replace('-', '+') }}",
       "{}", "Hello world Ab Cd-Ef (Gh a+b"},
      {"{{ [1, 2]|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ x|length }}", "{}",
       "2 5 1 0"},
      {"{{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'ab'|first }} [{{ []|first }}]", "{}", "1 2 a []"},
      {"{{ [1, 'a']|join(', ') }} {{ ['x', 'y']|join }} {{ parts|join('-', attribute='type') }}",
       parts, "1, a xy image-text-text"},
      {"{{ x|default('d') }} [{{ ''|default('e') }}] {{ ''|default('e', true) }} {{ x|d('f') }}",
       "{}", "d [] e f"},
      {"{{ parts|selectattr('type', 'equalto', 'text')|map(attribute='text')|join }} "
       "{{ parts|rejectattr('type', 'equalto', 'text')|list|length }} "
       "{{ parts|selectattr('text')|list|length }}",
       parts, "ab 1 2"},
      {"{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} "
       "{{ [3, 1]|map('string')|list }}",
       "{}", "[1, 3] [2, 4] ['3', '1']"},
      {"{{ 'abc'|list }} {{ [1, 2]|reverse|list }} {{ 5|string ~ '!' }} {{ '42'|int + 1 }} "
       "{{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }}",
       "{}", "['a', 'b', 'c'] [2, 1] 5! 43 4 0 7 3 2.5"},
      {"{% for k, v in {'a': 2, 'b': 1}|items %}{{ k }}={{ v }};{% endfor %} {{ '<b>'|safe }} "
       "{{ -3|abs }}",
       "{}", "a=2;b=1; <b> 3"},
  });
}

TEST(ChatTemplateTest, ToJsonWritesPythonJsonDumps) {
  ExpectRenders({
      {R"j({{ {'a': [1.5, none, true], 'b': 1}|tojson }})j", "{}",
       R"j({"a": [1.5, null, true], "b": 1})j"},
      {"{{ {'a': [1, {}], 'b': 'q'}|tojson(indent=2) }}", "{}",
       "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": \"q\"\n}"},
      {"{{ v|tojson }}", R"j({"v": "h\u00e9 <b> & \"q\"\n\u0001"})j",
       "\"h\xC3\xA9 <b> & \\\"q\\\"\\n\\u0001\""},
  });
}

TEST(ChatTemplateTest, Methods) {
  ExpectRenders({
      {"{{ ' x '.strip() }}|{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ 'xax'.strip('x') }}", "{}",
       "x|x | x|a"},
      {"{{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ \"they're bill\".title() }} "
       "{{ 'hello'.capitalize() }}",
       "{}", "AB ab They'Re Bill Hello"},
      {"{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'x'.startswith(('a', 'x')) }}",
       "{}", "True True True"},
      {"{{ '  a b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }}", "{}",
       "['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b c']"},
      {"{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ ', '.join(['a', 'b']) }}",
       "{}", "bbb bba a, b"},
      {"{% for m in messages %}{{ m.get('name', 'anon') }} {{ m.get('x') }} "
       "{{ m.keys()|list }};{% endfor %}",
       R"j({"messages": [{"role": "u", "name": "bob"}, {"role": "a"}]})j",
       "bob None ['name', 'role'];anon None ['role'];"},
      {"{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %} {{ d.values()|list }}",
       R"j({"d": {"x": 1, "y": 2}})j", "x1y2 [1, 2]"},
  });
}

TEST(ChatTemplateTest, ForLoops) {
  ExpectRenders({
      {"{% for i in range(3) %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
       "{{ loop.length }}{{ loop.revindex }};{% endfor %}",
       "{}", "10TrueFalse33;21FalseFalse32;32FalseTrue31;"},
      {"{% for x in [] %}a{% else %}empty{% endfor %} "
       "{% for x in [1, 2, 3] if x > 5 %}{{ x }}{% else %}none{% endfor %}",
       "{}", "empty none"},
      {"{% for i in range(4) if i != 1 %}{{ loop.index }}:{{ i }} {% endfor %}", "{}",
       "1:0 2:2 3:3 "},
      {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
       "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
       "{}", "02"},
      {"{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}"
       "{{ loop.index }}|{% endfor %}",
       "{}", "113 214 1|123 224 2|"},
      {"{% for k, v in {'a': 2, 'b': 1}.items() %}{{ k }}={{ v }};{% endfor %}"
       "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for k in {'x': 0, 'y': 0} %}"
       "{{ k }}{% endfor %}",
       "{}", "a=2;b=1;37xy"},
      {"{% for i in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", "{}",
       "-2|1-3|2-|"},
      {"{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}", "{}",
       "[0, 1, 2] [1, 4, 7] [5, 3, 1]"},
  });
}

TEST(ChatTemplateTest, IfSetAndScoping) {
  ExpectRenders({
      {"{% if x %}a{% elif 1 == 2 %}b{% elif true %}c{% else %}d{% endif %}"
       "{% if false %}e{% else %}f{% endif %}",
       "{}", "cf"},
      // A set inside a loop body lasts one iteration; one inside an if does not scope.
      {"{% set x = 0 %}{% for i in range(3) %}[{{ x }}]{% set x = i %}({{ x }}){% endfor %}{{ x }}"
       "{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
       "{}", "[0](0)[0](1)[0](2)03"},
      {"{% set ns = namespace(found=false, n=0) %}{% for m in messages %}"
       "{% if m.role == 'system' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}"
       "{% endfor %}{{ ns.found }} {{ ns.n }}",
       R"j({"messages": [{"role": "user"}, {"role": "system"}]})j", "True 2"},
      {"{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = {'k': [1, 2]} %}{{ c.k[1] }}", "{}", "122"},
      {"{% set greeting %}Hello {{ name }}!{% endset %}{{ greeting|upper }}",
       R"j({"name": "bob"})j", "HELLO BOB!"},
      {"{% set messages = messages[1:] %}{{ messages|length }}",
       R"j({"messages": [{"role": "system"}, {"role": "user"}]})j", "1"},
      {"{% generation %}A{% endgeneration %}", "{}", "A"},
  });
}

// Where this interpreter knowingly differs from Jinja.
TEST(ChatTemplateTest, DocumentedDifferencesFromJinja) {
  ExpectRenders({
      // Dicts are JSON objects, which keep keys sorted (Python keeps insertion order).
      {"{{ {'b': 1, 'a': 2} }} {{ {'b': 1, 'a': 2}|tojson }} {% for k in {'b': 1, 'a': 2} %}"
       "{{ k }}{% endfor %}",
       "{}", R"j({'a': 2, 'b': 1} {"a": 2, "b": 1} ab)j"},
      // Tuples are lists: Jinja writes (1, 2) and [('a', 1)].
      {"{{ (1, 2) }} {{ {'a': 1}.items()|list }}", "{}", "[1, 2] [['a', 1]]"},
  });
}

TEST(ChatTemplateTest, UndefinedRendersEmptyAndIsFalsy) {
  // An attribute or item of an undefined value is undefined here; Jinja raises for x.y and x[0].
  ExpectRenders({
      {"[{{ x }}][{{ x.y.z }}][{{ x[0] }}][{{ x|join }}][{{ x|trim }}]"
       "{% if x %}t{% else %}f{% endif %}{% for i in x %}i{% endfor %}{{ x|list }}",
       "{}", "[][][][][]f[]"},
      {"{{ x == x }} {{ x is defined }} {{ messages[0].missing is defined }}",
       R"j({"messages": [{"role": "user"}]})j", "True False False"},
  });
}

TEST(ChatTemplateTest, WhitespaceControlTrimBlocksAndLstripBlocks) {
  ExpectRenders({
      // trim_blocks removes a block tag's newline; lstrip_blocks the indentation before it.
      {"  {% if true %}\n  yes\n  {% endif %}\nafter", "{}", "  yes\nafter"},
      // Comments are block-like; {{ }} is neither trimmed nor lstripped.
      {"a\n  {# c #}\nb\n  {{ 'v' }}\nc", "{}", "a\nb\n  v\nc"},
      // Text before a tag on the same line is kept.
      {"x {% if true %}y{% endif %}\n", "{}", "x y"},
      {"{% for m in [1, 2] %}\n    {{ m }}\n{% endfor %}", "{}", "    1\n    2\n"},
      // '-' strips all whitespace on that side, newlines included.
      {"a  \n {%- if true -%}  \n b {%- endif %}\n  c {{- 'd' -}}  \n e", "{}", "ab  cde"},
      {"{%- for m in ['a', 'b'] -%}\n  [{{ m }}]\n{%- endfor %}\nend", "{}", "[a][b]end"},
      // '+' keeps what trim_blocks and lstrip_blocks would remove.
      {"  {%+ if true %}x{% endif +%}\ny", "{}", "  x\ny"},
      // Newlines are normalized and the one trailing newline dropped.
      {"a\r\nb\r{% if true %}\r\nc{% endif %}\n", "{}", "a\nb\nc"},
      {"x\n\n", "{}", "x\n"},
  });
}

TEST(ChatTemplateTest, ChatMlTemplate) {
  const char* chatml =
      "{% for message in messages %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  ExpectRenders({{chatml,
                  R"j({"add_generation_prompt": true, "messages": [
                       {"role": "system", "content": "You are helpful."},
                       {"role": "user", "content": "Hi"}]})j",
                  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\n"}});
}

// Llama-2's chat template (one line, as its tokenizer_config.json has it): an optional system
// prompt folded into the first user turn, alternation enforced with raise_exception and
// loop.index0.
const char* const kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}";

TEST(ChatTemplateTest, Llama2TemplateRendersAndRaises) {
  auto t = ChatTemplate::Parse(kLlama2, "llama2");
  ASSERT_TRUE(t.ok()) << t.status();
  auto out = RenderWith(*t, R"j({"bos_token": "<s>", "eos_token": "</s>", "messages": [
      {"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi "},
      {"role": "assistant", "content": " Hello"}, {"role": "user", "content": "Bye"}]})j");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");

  const absl::Status s = RenderWith(*t, R"j({"bos_token": "<s>", "eos_token": "</s>", "messages": [
      {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})j")
                             .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      std::string(s.message()),
      "llama2: line 1:314: Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplateTest, SyntaxErrorsNameLineAndColumn) {
  ExpectError("{% if x %}",
              "test: line 1:11: expected 'elif' or 'else' or 'endif' (to close 'if' "
              "at line 1:4), got end of template");
  ExpectError("a\n{% for m in messages %}\n{% endif %}",
              "line 3:4: expected 'else' or 'endfor' (to close 'for' at line 2:4), got 'endif'");
  ExpectError("{{ 1 + }}", "line 1:8: expected an expression, got '}}'");
  ExpectError("{% endif %}", "line 1:4: unexpected 'endif'");
  ExpectError("x\n  {{ 'open }}", "line 2:6: unterminated string literal");
  ExpectError("{% for %}{% endfor %}", "line 1:8: expected a loop variable name, got '%}'");
  ExpectError("{% set x 1 %}", "line 1:10: expected '=', got number 1");
  ExpectError("{{ a ] }}", "line 1:6: unexpected ']'");
  ExpectError("{{ x }", "line 1:6: unexpected '}'");
  ExpectError("a\n{% if x", "line 2:1: unterminated tag: expected '%}'");
  ExpectError("{# open", "line 1:1: unterminated comment: expected '#}'");
  ExpectError("{% macro f() %}{% endmacro %}", "line 1:4: unsupported tag 'macro'");
  ExpectError("{% break %}", "line 1:4: 'break' outside a for loop");
  ExpectError("{{ a is }}", "line 1:9: expected a test name, got '}}'");
  ExpectError("{{ x ! y }}", "line 1:6: unexpected character '!'");
}

TEST(ChatTemplateTest, RuntimeErrorsNameTheLine) {
  ExpectError("\n{{ x|nope }}", "test: line 2:5: unknown filter 'nope'");
  ExpectError("{{ 5() }}", "line 1:4: 'int' object is not callable");
  ExpectError("{{ foo() }}", "line 1:4: 'foo' is undefined");
  ExpectError("{{ ''.nope() }}", "'str object' has no attribute 'nope'");
  ExpectError("{{ raise_exception('boom') }}", "line 1:4: boom");
  ExpectError("{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'");
  ExpectError("{{ x + 1 }}", "'x' is undefined");
  ExpectError("{{ 1 / 0 }}", "division by zero");
  ExpectError("{% for x in 5 %}{% endfor %}", "'int' object is not iterable");
  ExpectError("{{ x is nope }}", "unknown test 'nope'");
  ExpectError("{% set a, b = [1] %}", "not enough values to unpack (expected 2, got 1)");
  ExpectError("{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute on non-namespace");
  // A namespace inside itself, directly or through another, would never be freed (found by
  // chat_template_fuzz as a leak).
  ExpectError("{% set ns = namespace(n=0) %}{% set ns.self = ns %}",
              "cannot store namespace 'ns' inside itself (ns.self)");
  ExpectError("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}",
              "cannot store namespace 'a' inside itself (a.b)");
  EXPECT_TRUE(RenderError("{% set a = namespace() %}{% set b = namespace() %}{% set a.b = b %}"
                          "{% set b.n = 1 %}{{ a.b.n }}")
                  .ok());
  // Unknown filters are looked up when used: an unreached branch may name one.
  EXPECT_TRUE(RenderError("{% if false %}{{ x|nope }}{% endif %}").ok());
}

TEST(ChatTemplateTest, LimitsAndBadArguments) {
  ExpectError("{{ range(100001)|length }}", "range too big");
  std::string deep = "{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}";
  ExpectError(deep.c_str(), "nested too deeply");
  std::string chain = "{{ 1";
  for (int i = 0; i < 300; ++i) chain += " + 1";
  ExpectError((chain + " }}").c_str(), "nested too deeply");
  // Found by tests/fuzz/chat_template_fuzz: work the loop and output limits leave open, such as
  // slicing a long list in every iteration (quadratic) or repeating a list to millions of items,
  // counts against the values one render may make.
  ExpectError("{% set xs = range(3000)|list %}{% for x in xs %}{{ xs[::-1][0] }}{% endfor %}",
              "makes more than 4194304 values in one render");
  ExpectError("{{ ([0] * 5000000)|length }}", "repetition result too large");
  auto within = ChatTemplate::Parse(
      "{% set xs = range(1000)|list %}{% for x in xs %}{{ xs[::-1][0] }}{% endfor %}"
      "|{{ ([0] * 3000000)|length }}",
      "test");
  ASSERT_TRUE(within.ok()) << within.status();
  auto text = within->Render(Json::array(), false);
  ASSERT_TRUE(text.ok()) << text.status();
  std::string want;
  for (int i = 0; i < 1000; ++i) want += "999";
  EXPECT_EQ(*text, want + "|3000000");
  auto t = ChatTemplate::Parse("x", "test");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Render(Json::array(), false, Json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // messages and add_generation_prompt are Render's own; extra cannot replace them.
  t = ChatTemplate::Parse("{{ messages|length }}{{ add_generation_prompt }}", "test");
  ASSERT_TRUE(t.ok());
  auto out = t->Render(Json::array({1}), true, Json{{"messages", Json::array()}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "1True");
}

// ForModelDir

class ChatTemplateDirTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("chat_template_" +
            std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST_F(ChatTemplateDirTest, ReadsChatTemplateJsonFirst) {
  Write("chat_template.json", R"j({"chat_template": "P{{ messages|length }}"})j");
  Write("tokenizer_config.json", R"j({"chat_template": "T"})j");
  auto t = ChatTemplate::ForModelDir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->origin(), "chat_template.json");
  EXPECT_EQ(t->source(), "P{{ messages|length }}");
  auto out = t->Render(Json::array({Json::object()}), false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "P1");
}

TEST_F(ChatTemplateDirTest, ReadsTokenizerConfig) {
  Write("tokenizer_config.json",
        R"j({"bos_token": "<s>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"})j");
  auto t = ChatTemplate::ForModelDir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->origin(), "tokenizer_config.json");
  auto out = t->Render(Json::parse(R"j([{"role": "user", "content": "hi"}])j"), false,
                       Json{{"bos_token", "<s>"}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>hi");
}

TEST_F(ChatTemplateDirTest, TakesTheDefaultOfNamedTemplates) {
  Write("tokenizer_config.json", R"j({"chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]})j");
  auto t = ChatTemplate::ForModelDir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->source(), "plain");
  Write("tokenizer_config.json", R"j({"chat_template": [{"name": "tool_use", "template": "x"}]})j");
  EXPECT_EQ(ChatTemplate::ForModelDir(dir_.string()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ChatTemplateDirTest, FallsBackToLlava15) {
  auto t = ChatTemplate::ForModelDir(dir_.string());  // neither file
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->origin(), "built-in LLaVA-1.5");
  Write("tokenizer_config.json", R"j({"bos_token": "<s>"})j");  // no chat_template key
  t = ChatTemplate::ForModelDir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->origin(), "built-in LLaVA-1.5");
  auto out = RenderWith(*t, kLlavaUserTurn);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "USER: <image>\nWhat is shown? ASSISTANT:");
}

TEST_F(ChatTemplateDirTest, BrokenFilesAreErrorsNamingTheFile) {
  const std::string processor = (dir_ / "chat_template.json").string();
  Write("chat_template.json", "{\"chat_template\": ");
  absl::Status s = ChatTemplate::ForModelDir(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find(processor + ": malformed JSON"), std::string::npos) << s;

  Write("chat_template.json", R"j({"chat_template": "{% if x %}"})j");
  s = ChatTemplate::ForModelDir(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find(processor + ": line 1:11: expected"), std::string::npos)
      << s;

  fs::remove(processor);
  Write("tokenizer_config.json", "not json");
  s = ChatTemplate::ForModelDir(dir_.string()).status();
  EXPECT_NE(std::string(s.message()).find((dir_ / "tokenizer_config.json").string()),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace hap
