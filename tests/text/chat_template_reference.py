"""Checks runtime/text's chat-template interpreter against @huggingface/jinja (pinned in
hf_reference/package.json; the interpreter transformers.js' apply_chat_template uses) as an
independent reference.

usage: chat_template_reference.py TEXT_TOOL SOURCE_DIR WORK_DIR

Templates: LLaVA-1.5's as llava-hf ships it and Qwen2.5-VL-Instruct's, both read from the C++
constants the project writes into model directories, plus published templates of other model
families, reproduced here (they exercise bos_token, trim and strip, raise_exception on role
alternation, loop.index0 and role mapping, namespace counters, selectattr, tools with tojson,
the generation tag and whitespace control), and one template of our own for the constructs the
published ones leave out. Conversations: system/user/assistant turns, content as a string and as
parts (images and text, in either order), quotes, backslashes, newlines, tabs, Jinja-looking and
non-ASCII text (case mapping, Unicode whitespace around text that trim and strip remove),
empty content, add_generation_prompt on and off, tool calls, and conversations that make a
template raise. Every template renders each conversation of the forms it is written for with
`text_tool render` and with hf_reference/render.mjs; the texts must be identical, or both
renderers must fail (the messages may differ). A template that renders no conversation without
an error fails too.

Exits 77 (ctest: skipped) with the reason when node or the npm package is missing.

Where @huggingface/jinja 0.5.11 departs from Python Jinja2 3.1 (as transformers configures it:
trim_blocks, lstrip_blocks, keep_trailing_newline off) the corpus avoids the construct rather
than model the difference:
  - wrong-typed content: it concatenates a list to a string with `+` (Jinja2 raises), raises on
    trim of a list or None, selectattr over a string and a for loop over a string (Jinja2 takes
    str() or the characters). So each template renders only the forms of content it is written
    for (PARTS, STRING, TOOLS below), and one pair is left out (LEFT_OUT);
  - filters and tests it lacks: reject (Llama-3.1's builtin_tools branch, so no conversation
    has builtin_tools), count, divisibleby, sameas; a test's argument without parentheses
    (`is divisibleby 3`), chained comparisons (`1 < x < 3`) and `{%+` do not parse (its
    lstrip_blocks and trim_blocks are regex passes over the source, before lexing);
  - printing: booleans as true/false, lists and dicts as JSON, whole floats as integers
    (`1.0 ~ ''` is '1'), string lengths, indexes and slices in UTF-16 code units, title wrong
    past ASCII, capitalize that keeps the case of the rest; the corpus prints no booleans,
    containers or whole floats and measures and slices ASCII text only;
  - an attribute or item of an undefined value is undefined for both renderers here, where
    Jinja2 raises UndefinedError (runtime/text/chat_template.h documents that leniency), so no
    conversation reaches one.
Dict keys are sorted in the data at every level: ChatTemplate keeps JSON objects sorted (see
chat_template.h) where Python and JavaScript keep insertion order.
"""
import json
import os
import re
import subprocess
import sys

from reference_run import lines_of, node_with, run

TOOL, SOURCE_DIR, WORK_DIR = sys.argv[1:4]
HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "hf_reference")
CONTEXT = 40  # characters shown either side of the first difference


NODE = node_with(REFERENCE, "jinja")


def cpp_string_constant(relpath, name):
    """The value of `const char name[] = "..." "...";` in a C++ source file."""
    with open(os.path.join(SOURCE_DIR, relpath), encoding="utf-8") as f:
        source = f.read()
    m = re.search(r"const char " + re.escape(name) + r"\[\]\s*=((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*;",
                  source)
    if not m:
        sys.exit(f"FAIL: no string constant {name} in {relpath}")
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}
    out = []
    for literal in re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1)):
        out.append(re.sub(r"\\(.)", lambda e: escapes[e.group(1)], literal))
    return "".join(out)


LLAMA_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
SPM_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
QWEN_TOKENS = {"bos_token": "", "eos_token": "<|im_end|>"}
GEMMA_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>"}

# The forms of conversation a template is written for: content as a list of parts (what the
# server passes, services/openai/chat_api.cc), content as a string (what text-only clients of
# transformers pass), and tool calls (content None, tool_calls, role "tool", a `tools` variable).
# A template only renders the forms it names: given another, @huggingface/jinja departs from
# Jinja2 (see the module comment), and the C++ str() of a dict lists its keys sorted.
PARTS, STRING, TOOLS = frozenset({"parts"}), frozenset({"string"}), frozenset({"tools"})

# name -> (source, variables every conversation gets, forms). Single-line templates are raw
# strings, so a `'\n'` is the escape inside a Jinja string literal, as in tokenizer_config.json.
TEMPLATES = {
    # LLaVA-1.5 as llava-hf ships it (runtime/io/side_files.cc writes it into model directories).
    "llava-1.5": (cpp_string_constant("runtime/io/side_files.cc", "kLlava15ChatTemplate"),
                  SPM_TOKENS, PARTS),
    # Qwen2.5-VL-Instruct (runtime/tiny/bytelevel_bpe.cc writes it for make-tiny's checkpoints).
    "qwen2.5-vl": (cpp_string_constant("runtime/tiny/bytelevel_bpe.cc", "kQwen25VLChatTemplate"),
                   QWEN_TOKENS, PARTS | STRING),
    # llava-hf/llava-onevision-qwen2-7b-ov-hf: ChatML with images and videos first, generation.
    "llava-onevision": (
        r"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
        r"{# Render all images first #}{% for content in message['content'] | selectattr('type', "
        r"'equalto', 'image') %}{{ '<image>' }}{% endfor %}{# Render all video then #}"
        r"{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
        r"{{ '<video>' }}{% endfor %}{# Render all text next #}{% if message['role'] != "
        r"'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', "
        r"'text') %}{{ '\n' + content['text'] }}{% endfor %}{% else %}{% for content in "
        r"message['content'] | selectattr('type', 'equalto', 'text') %}{% generation %}"
        r"{{ '\n' + content['text'] }}{% endgeneration %}{% endfor %}{% endif %}"
        r"{{'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}"
        r"{{ '<|im_start|>assistant\n' }}{% endif %}",
        QWEN_TOKENS, PARTS),
    # llava-hf/llava-v1.6-mistral-7b-hf (LLaVA-NeXT): [INST] turns, images first.
    "llava-next-mistral": (
        r"{% for message in messages %}{% if message['role'] == 'system' %}"
        r"{{ '<<SYS>>\n' + message['content'][0]['text'] + '\n<</SYS>>\n\n' }}"
        r"{% elif message['role'] == 'user' %}{{ '[INST] ' }}{# Render all images first #}"
        r"{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
        r"{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% for content in "
        r"message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}"
        r"{% endfor %}{{' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        r"{{ message['content'][0]['text'] + '</s>'}}{% else %}"
        r"{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
        r"{% endfor %}",
        SPM_TOKENS, PARTS),
    # HuggingFaceTB/SmolVLM-Instruct (Idefics3): capitalize, a text newline inside the loop. No
    # conversation has an empty parts list: `content[0]['type']` of one raises in Jinja2 and is
    # undefined in both renderers here.
    "smolvlm": (
        "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
        "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
        "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
        "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
        "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}"
        "{% endif %}",
        {"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>"}, PARTS),
    # meta-llama/Meta-Llama-3-8B-Instruct: bos_token, `+ x | trim` (the filter binds tighter).
    "llama-3": (
        r"{% set loop_messages = messages %}{% for message in loop_messages %}"
        r"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
        r"message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        r"{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        r"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        r"{% endif %}",
        LLAMA_TOKENS, STRING),
    # meta-llama/Llama-3.1-8B-Instruct: indented multi-line source under {%- -%}, defaults for
    # undefined variables, messages[1:], tools in the first user message with tojson(indent=4),
    # builtin_tools with reject/join, single tool call with tojson.
    "llama-3.1": (r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
""", LLAMA_TOKENS, STRING | TOOLS),
    # meta-llama/Llama-3.2-11B-Vision-Instruct's image handling (tools part as in llama-3.1,
    # left out): a namespace flag set inside nested loops, raise_exception for images with a
    # system message. Parts only: for string content its image scan loops over the characters,
    # which @huggingface/jinja refuses. Its strftime_now date is pinned through date_string so
    # the two renderers agree at midnight.
    "llama-3.2-vision": (r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- Find out if there are any images #}
{% set image_ns = namespace(has_images=false) %}      
{%- for message in messages %}
    {%- for content in message['content'] %}
        {%- if content['type'] == 'image' %}
            {%- set image_ns.has_images = true %}
        {%- endif %}
    {%- endfor %}
{%- endfor %}

{#- Error out if there are images and system message #}
{%- if image_ns.has_images and not system_message == "" %}
    {{- raise_exception("Prompting with images is incompatible with system messages.") }}
{%- endif %}

{#- System message if there are no images #}
{%- if not image_ns.has_images %}
    {{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
    {{- "Cutting Knowledge Date: December 2023\n" }}
    {{- "Today Date: " + date_string + "\n\n" }}
    {{- system_message }}
    {{- "<|eot_id|>" }}
{%- endif %}

{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
    {%- if message['content'] is string %}
        {{- message['content'] }}
    {%- else %}
        {%- for content in message['content'] %}
            {%- if content['type'] == 'image' %}
                {{- '<|image|>' }}
            {%- elif content['type'] == 'text' %}
                {{- content['text'] }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
""", LLAMA_TOKENS, PARTS),
    # meta-llama/Llama-2-7b-chat-hf: messages[1:], `!= false`, .strip(), raise_exception.
    "llama-2": (
        r"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        r"{% set system_message = messages[0]['content'] %}{% else %}"
        r"{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
        r"{% for message in loop_messages %}{% if (message['role'] == 'user') != "
        r"(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        r"user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and "
        r"system_message != false %}{% set content = '<<SYS>>\n' + system_message + "
        r"'\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = "
        r"message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        r"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == "
        r"'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
        SPM_TOKENS, STRING),
    # mistralai/Mistral-7B-Instruct-v0.1: raise_exception on role alternation and other roles.
    "mistral-instruct": (
        r"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
        r"(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        r"user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
        r"{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
        r"'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
        r"user and assistant roles are supported!') }}{% endif %}{% endfor %}",
        SPM_TOKENS, STRING),
    # mistral-community/pixtral-12b: system message into the last user turn, [IMG] chunks,
    # `is defined` on a variable set in a branch, `is not string`.
    "pixtral": (r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message["role"] == "user" %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" }}
        {%- else %}
            {{- "[INST]" }}
        {%- endif %}
        {%- if message["content"] is not string %}
            {%- for chunk in message["content"] %}
                {%- if chunk["type"] == "text" %}
                    {{- chunk["text"] }}
                {%- elif chunk["type"] == "image" %}
                    {{- "[IMG]" }}
                {%- else %}
                    {{- raise_exception("Unrecognized content type!") }}
                {%- endif %}
            {%- endfor %}
        {%- else %}
            {{- message["content"] }}
        {%- endif %}
        {{- "[/INST]" }}
    {%- elif message["role"] == "assistant" %}
        {%- if message["content"] is not string %}
            {{- message["content"][0]["text"] + eos_token}}
        {%- else %}
            {{- message["content"] + eos_token }}
        {%- endif %}
    {%- else %}
        {{- raise_exception("Only user and assistant roles, except for the first system message, are supported!") }}
    {%- endif %}
{%- endfor %}
""", SPM_TOKENS, PARTS | STRING),
    # google/gemma-7b-it: role mapping with set inside the loop, loop.index0, `+ x | trim`.
    "gemma": (
        r"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System "
        r"role not supported') }}{% endif %}{% for message in messages %}{% if "
        r"(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('"
        r"Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        r"{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
        r"{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + "
        r"message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if "
        r"add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
        GEMMA_TOKENS, STRING),
    # google/gemma-3-4b-it: {%- -%} everywhere, a conditional expression, `is iterable`,
    # images as <start_of_image>, the system message prefixed to the first user turn.
    "gemma-3": (r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
""", GEMMA_TOKENS, PARTS | STRING),
    # Qwen/Qwen2-7B-Instruct: plain ChatML with a default system message.
    "qwen2": (
        r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        r"{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
        r"{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        r"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
        QWEN_TOKENS, STRING),
    # Qwen/Qwen2.5-7B-Instruct: tools (tojson per tool), tool calls, grouped tool responses
    # (messages[loop.index0 - 1], loop.last), attribute access on dicts.
    "qwen2.5": (r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
""", QWEN_TOKENS, STRING | TOOLS),
    # microsoft/Phi-3-mini-4k-instruct: elif chain, eos_token when no generation prompt.
    "phi-3": (
        r"{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
        r"message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
        r"{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == "
        r"'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
        r"{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}"
        r"{{ eos_token }}{% endif %}",
        {"bos_token": "<s>", "eos_token": "<|endoftext|>"}, STRING),
    # HuggingFaceH4/zephyr-7b-beta: block-level whitespace in the template text itself (newlines
    # after tags that trim_blocks removes, the text newline before {% endif %} it keeps).
    "zephyr": (
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
        "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'system' %}\n"
        "{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n"
        "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
        "{% endfor %}",
        SPM_TOKENS, STRING),
    # Not a published template: constructs the ones above leave out, each a case of Jinja2 3.1
    # with transformers' settings. Indented tags on their own lines (lstrip_blocks), a comment
    # line, `{%- set %}...{% endset %}`, for/else, loop.revindex/length/previtem/nextitem,
    # break/continue, filters (length, join, map, first, last, reverse, default, replace, title,
    # upper, lower, list, selectattr, rejectattr, string, int, abs), tests, slicing, `~`,
    # `//`, `%`, `**`, `in`, string methods, dict methods, dict/list literals and tojson of them,
    # escapes in string literals, range, and an `if` filter on a for loop. Booleans are not
    # printed, and lengths and slices are taken of ASCII text only (see the module comment).
    "features": (r"""{# A comment on its own line is dropped with its newline. #}
{%- set ns = namespace(parts=0, users=0) -%}
{%- for message in messages if message.role != 'system' -%}
    {%- set ns.users = ns.users + (1 if message.role == 'user' else 0) %}
  [{{ loop.index }}/{{ loop.length }} rev{{ loop.revindex }}
    {%- if loop.previtem is defined %} after {{ loop.previtem.role }}{% endif %}
    {%- if loop.nextitem is defined %} before {{ loop.nextitem.role }}{% endif %}]
    {% if message.content is string %}
        {%- set text = message.content %}
    {%- else %}
        {%- set text = message.content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join(' | ') %}
        {%- set ns.parts = ns.parts + message.content | length %}
        {{- '#images=' ~ (message.content | selectattr('type', 'eq', 'image') | list | length) ~ ' ' }}
        {{- 'rejected=' ~ (message.content | rejectattr('type', 'equalto', 'text') | list | length) ~ ' ' }}
    {%- endif %}
    {{- message.role | upper }}: {{ text.strip() | replace('\n', '\\n') }}
    {{- ' | role=' + message.role | title + ' | mid=' + message.role[1:4] + ' | rev=' + message.role[::-1] }}
    {{- ' | upper=' + text | upper + ' | low=' + text.lower() if text else ' | empty' }}
    {%- if text.startswith('What') or text.endswith('?') %} (question){% endif %}
    {%- if 'image' in text or '"' in text %} (mentions){% endif %}
{% else %}
(no messages)
{% endfor %}
{%- set summary -%}
    parts={{ ns.parts }} users={{ ns.users }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ -7 // 2 }}
{%- endset %}
{{ summary | trim }}
{% for i in range(1, 10, 3) %}{{ i }}{% if i is even %}e{% elif i is odd %}o{% endif %},{% endfor %}
{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}
{{ [3, 1, 2] | reverse | list | first }}-{{ [3, 1, 2] | last }}-{{ missing | default('dflt') }}-{{ none | default('kept', true) }}-{{ -5 | abs }}-{{ '42' | int + 1 }}-{{ 12 | string + '!' }}
{%- set d = {'a': 1, 'b': [true, none, 'x"y'], 'c': {'d': 'é\t'}} %}
{{ d | tojson }} {{ d.get('a') }} {{ d.get('zz', 'none-here') }} {{ d['b'][-1] }} {{ d.keys() | list | join(',') }}
{% for k, v in d.items() %}{{ k }}={{ 'M' if v is mapping }}{{ 'S' if v is sequence }}{{ 'N' if v is number }};{% endfor %}
{{ 'a\'b' }} {{ "tab\there" }} {{ 'uni\u00e9' }} {{ 'x' if messages | length > 1 else 'y' }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }}
{{ 'Hello World'.lower().title().replace('World', 'There') }} {{ 'a,b,,c'.split(',') | length }} {{ 'hello world'[::-1][:5] }}
{%- if add_generation_prompt %}

ASSISTANT:
{%- endif %}
""", SPM_TOKENS, PARTS | STRING),
}


def text(t):
    return {"type": "text", "text": t}


IMAGE = {"type": "image"}
QUOTES = 'He said "it\'s a \\"test\\"" \u2014 back\\slash, tab\tand\nnewline {{ not_a_tag }} {% raw %}'
UNICODE = ("naïve café ÉCOLE ΟΔΟΣ Straße 日本語 한국어 😀👍🏽 e\u0301 \u00a0nbsp\u2028ls "
           "zero\u200bwidth")
# Unicode whitespace that Python's str.strip() (Jinja's trim) removes, and JavaScript's trim()
# too: no U+0085 or U+001C..U+001F (not JavaScript whitespace), no U+FEFF (not Python's).
UNICODE_SPACES = "\u3000\u00a0\u2028\u2029\u2003\u202f\u205f\u1680"
PADDED = f"{UNICODE_SPACES} \t\n padded in Unicode spaces{UNICODE_SPACES}\u00a0\n"
TOOLS = [{"function": {"description": "Get the current weather in a city.",
                       "name": "get_weather",
                       "parameters": {"properties": {"city": {"description": "City name",
                                                              "type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"],
                                                              "type": "string"}},
                                      "required": ["city"], "type": "object"}},
          "type": "function"}]
TOOL_CALL = {"function": {"arguments": {"city": "Paris", "unit": "celsius"},
                          "name": "get_weather"}, "type": "function"}

# name -> (messages, add_generation_prompt, extra variables); the name starts with its form.
CONVERSATIONS = {
    "parts: one image, question": (
        [{"role": "user", "content": [IMAGE, text("What is in the image?")]}], True, {}),
    "parts: system, image, answer, follow-up": (
        [{"role": "system", "content": [text("You are a helpful assistant.")]},
         {"role": "user", "content": [IMAGE, text("Describe the scene.")]},
         {"role": "assistant", "content": [text("A red car parked by a tree.")]},
         {"role": "user", "content": [text("What colour is the car?")]}], True, {}),
    "parts: text before image, no generation prompt": (
        [{"role": "user", "content": [text("Compare this:"), IMAGE, text("with that.")]}],
        False, {}),
    "parts: two images, assistant last": (
        [{"role": "user", "content": [IMAGE, IMAGE, text("Which is bigger?")]},
         {"role": "assistant", "content": [text("The first one.")]}], False, {}),
    "parts: quotes, escapes, Jinja-looking text": (
        [{"role": "user", "content": [IMAGE, text(QUOTES)]}], True, {}),
    "parts: unicode": (
        [{"role": "user", "content": [text(UNICODE), IMAGE]}], True, {}),
    "parts: empty text, padded text": (
        [{"role": "user", "content": [IMAGE, text("")]},
         {"role": "assistant", "content": [text("  padded  \n\n")]},
         {"role": "user", "content": [text("\n\t ok \t\n")]}], True, {}),
    "parts: two user turns in a row": (
        [{"role": "user", "content": [IMAGE, text("first")]},
         {"role": "user", "content": [text("second")]}], True, {}),
    "parts: Unicode whitespace around the text": (
        [{"role": "user", "content": [IMAGE, text(PADDED)]},
         {"role": "assistant", "content": [text(PADDED)]},
         {"role": "user", "content": [text(PADDED)]}], True, {}),
    "parts: vision ids": (
        [{"role": "user", "content": [IMAGE, text("and"), IMAGE, text("?")]}], True,
        {"add_vision_id": True}),
    "string: hello": (
        [{"role": "user", "content": "Hello!"}], True, {}),
    "string: system, user, assistant, user": (
        [{"role": "system", "content": "You are terse."},
         {"role": "user", "content": "Hi there."},
         {"role": "assistant", "content": "Hello. How can I help?"},
         {"role": "user", "content": "Name a colour."}], True, {}),
    "string: assistant last, no generation prompt": (
        [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], False, {}),
    "string: quotes, escapes, Jinja-looking text": (
        [{"role": "user", "content": QUOTES}], True, {}),
    "string: unicode": (
        [{"role": "system", "content": UNICODE}, {"role": "user", "content": UNICODE}], True, {}),
    "string: empty and whitespace content": (
        [{"role": "user", "content": ""}, {"role": "assistant", "content": " \n "},
         {"role": "user", "content": "  padded  \n\n"}], True, {}),
    "string: Unicode whitespace around the text": (
        [{"role": "system", "content": PADDED}, {"role": "user", "content": PADDED},
         {"role": "assistant", "content": PADDED}, {"role": "user", "content": "ok"}], True, {}),
    "string: roles do not alternate": (
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "assistant", "content": "c"}], True, {}),
    "string: assistant first": (
        [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}],
        True, {}),
    "string: system only": (
        [{"role": "system", "content": "Only a system prompt."}], True, {}),
    "string: long conversation": (
        [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
         for i in range(13)], True, {}),
    "tools: tool call, tool responses": (
        [{"role": "system", "content": "Use tools."},
         {"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
         {"role": "tool", "content": "{\"temperature\": 21}"},
         {"role": "tool", "content": "sunny"},
         {"role": "assistant", "content": "21 and sunny."}], True, {"tools": TOOLS}),
    "tools: no first user message": (
        [{"role": "system", "content": "Only system."}], True, {"tools": TOOLS}),
}

# llama-3.2-vision reads today's date when no date_string is given.
PINNED = {"date_string": "01 Jan 2025"}

# (template, conversation) pairs left out, with the reason.
LEFT_OUT = {
    # Its system message joins the last user turn as a string; as parts Jinja2 raises on
    # str + list, @huggingface/jinja concatenates.
    ("pixtral", "parts: system, image, answer, follow-up"),
}


def cpp_lines(path, cases_path, n):
    """text_tool render's lines; every case gets the error when the template does not parse."""
    r = subprocess.run([TOOL, "render", path, cases_path], capture_output=True)
    if r.returncode != 0:
        error = r.stderr.decode(errors="replace").strip()
        if "line " not in error:  # not a parse error of the template
            sys.exit(f"FAIL: text_tool render {path} exited with {r.returncode}:\n{error}")
        return [{"error": f"parse: {error}"}] * n
    out = [json.loads(line) for line in r.stdout.decode().split("\n") if line]
    if len(out) != n:
        sys.exit(f"FAIL: text_tool render {path} printed {len(out)} lines for {n} cases")
    return out


def show_difference(cpp, js):
    if "text" not in cpp or "text" not in js:
        return (f"    C++: {cpp.get('text', 'error: ' + cpp.get('error', '?'))!r}\n"
                f"    JS : {js.get('text', 'error: ' + js.get('error', '?'))!r}")
    a, b = cpp["text"], js["text"]
    at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, at - CONTEXT)
    return (f"    first difference at character {at} (lengths {len(a)} and {len(b)})\n"
            f"    C++: ...{a[lo:at + CONTEXT]!r}\n    JS : ...{b[lo:at + CONTEXT]!r}")


def main():
    os.makedirs(WORK_DIR, exist_ok=True)
    failures = compared = both_failed = 0
    for template, (source, variables, forms) in TEMPLATES.items():
        path = os.path.join(WORK_DIR, f"{template}.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        names = [name for name in CONVERSATIONS if name.split(":")[0] in forms and
                 (template, name) not in LEFT_OUT]
        cases = []
        for name in names:
            messages, generation_prompt, extra = CONVERSATIONS[name]
            cases.append({"messages": messages, "add_generation_prompt": generation_prompt,
                          "extra": {**variables, **PINNED, **extra}})
        cases_path = os.path.join(WORK_DIR, f"{template}.cases.json")
        with open(cases_path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        cpp = cpp_lines(path, cases_path, len(cases))
        js = lines_of([NODE, os.path.join(REFERENCE, "render.mjs"), path, cases_path],
                      len(cases), "cases")
        bad = []
        rendered = errors = 0
        for name, c, j in zip(names, cpp, js):
            compared += 1
            if "text" in c and "text" in j and c["text"] == j["text"]:
                rendered += 1
            elif "error" in c and "error" in j:
                errors += 1
            else:
                bad.append((name, c, j))
        both_failed += errors
        failures += len(bad)
        status = "FAIL" if bad or not rendered else "ok  "
        print(f"{status} {template}: {rendered} identical texts, {errors} errors on both sides, "
              f"{len(bad)} mismatches")
        if not rendered:
            failures += 1
            print(f"  renders no conversation; first errors: C++ {cpp[0].get('error')!r}, "
                  f"JS {js[0].get('error')!r}")
        for name, c, j in bad:
            print(f"  conversation {name!r}\n{show_difference(c, j)}")
    if failures:
        sys.exit(f"FAIL: {failures} mismatches in {compared} renders")
    print(f"PASS: {compared} renders ({len(TEMPLATES)} templates, {len(CONVERSATIONS)} "
          f"conversations) agree, {both_failed} of them failing on both sides")


main()
