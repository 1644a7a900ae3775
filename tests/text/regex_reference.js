// The JavaScript side of regex_parity.py: reads {"pattern": P, "texts": [..]} as JSON on stdin
// and prints, for each text, the spans [begin, end) in code points of
// text.matchAll(new RegExp(P, "gu")). No npm packages.
"use strict";

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const request = JSON.parse(input);
  let re;
  try {
    re = new RegExp(request.pattern, "gu");
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: String(e) }) + "\n");
    return;
  }
  const result = request.texts.map((text) => {
    // UTF-16 index -> code point index.
    const cp = new Array(text.length + 1);
    let n = 0;
    for (let i = 0; i <= text.length; ) {
      cp[i] = n;
      if (i === text.length) break;
      const c = text.codePointAt(i);
      const width = c > 0xffff ? 2 : 1;
      if (width === 2) cp[i + 1] = n;
      i += width;
      n += 1;
    }
    return Array.from(text.matchAll(re), (m) => [cp[m.index], cp[m.index + m[0].length]]);
  });
  process.stdout.write(JSON.stringify(result) + "\n");
});
