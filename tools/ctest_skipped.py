#!/usr/bin/env python3
"""Lists what a ctest run skipped, each with its reason, from ctest's --output-junit files: the
tests ctest reported as skipped (SKIP_RETURN_CODE, or disabled) with the line their output gave
as the reason, then the GoogleTest cases skipped inside tests that passed (GTEST_SKIP) with
theirs. `make test` prints it at the end.

  ctest_skipped.py JUNIT.xml [JUNIT.xml ...]
"""
import re
import sys
import xml.etree.ElementTree as ET


def reason_of(output):
    """The line that says why: one naming a skip, else the last non-empty line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"skipp", line, re.IGNORECASE):
            return line
    return lines[-1] if lines else "(no output)"


def gtest_skips(output):
    """(case, reason) for each GoogleTest case that ran and was skipped."""
    out, reason = [], ""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.search(r": Skipped$", line):
            reason = lines[i + 1].strip() if i + 1 < len(lines) else ""
        m = re.match(r"\[  SKIPPED \] (\S+) \(\d+ ms\)", line)
        if m:
            out.append((m.group(1), reason or "(no reason given)"))
            reason = ""
    return out


def main(paths):
    skipped, inner = [], []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"(no ctest results in {path}: {e})")
            continue
        for case in root.iter("testcase"):
            name = case.get("name")
            output = case.findtext("system-out") or ""
            if case.get("status") == "disabled":
                skipped.append((path, name, "disabled (DISABLED property)"))
            elif case.find("skipped") is not None:
                skipped.append((path, name, reason_of(output)))
            elif case.get("status") == "run" and case.find("failure") is None:
                inner.extend((path, name, c, r) for c, r in gtest_skips(output))
    print(f"Skipped by ctest: {len(skipped)}")
    for path, name, reason in skipped:
        print(f"  {name}: {reason}   [{path}]")
    print(f"Skipped GoogleTest cases inside passing tests: {len(inner)}")
    for path, name, case, reason in inner:
        print(f"  {name} {case}: {reason}   [{path}]")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
