// A tiny TAP-like reporter: `ok - name` / `not ok - name` with the reasons, and a closing
// "N passed, M failed" line that ctest's log and CI read.
"use strict";

class Report {
  constructor() {
    this.passed = 0;
    this.failed = 0;
  }

  // check records one named check; errors is a list of messages (empty = pass).
  check(name, errors) {
    if (!errors || errors.length === 0) {
      this.passed++;
      console.log(`ok - ${name}`);
      return true;
    }
    this.failed++;
    console.log(`not ok - ${name}`);
    for (const e of errors.slice(0, 20)) console.log(`    ${e}`);
    if (errors.length > 20) console.log(`    ... and ${errors.length - 20} more`);
    return false;
  }

  // run records a check whose body throws on failure.
  run(name, fn) {
    try {
      const r = fn();
      return this.check(name, Array.isArray(r) ? r : []);
    } catch (e) {
      return this.check(name, [e.message]);
    }
  }

  finish() {
    console.log(`${this.passed} passed, ${this.failed} failed`);
    process.exit(this.failed === 0 ? 0 : 1);
  }
}

module.exports = { Report };
