"""Running the C++ tools and the npm references for tests/text's reference tests
(tokenizer_reference.py, chat_template_reference.py): a command's output, or its JSON lines."""
import json
import os
import shutil
import subprocess
import sys


def skip(why):
    """Ends the test as skipped (exit 77) for a missing dependency."""
    print(f"SKIPPED: {why} (tools/install-deps.sh installs it)")
    sys.exit(77)


def node_with(reference_dir, package):
    """The node binary, when it and @huggingface/`package` under reference_dir are installed;
    otherwise the test is skipped."""
    node = shutil.which("node")
    if not node:
        skip("node is not installed (Debian/NodeSource package nodejs)")
    if not os.path.isfile(os.path.join(reference_dir, "node_modules", "@huggingface", package,
                                       "package.json")):
        skip(f"@huggingface/{package} is not installed (npm ci in tests/text/hf_reference)")
    return node


def run(cmd):
    """The command's stdout; exits with FAIL and its stderr when it fails."""
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited with {r.returncode}:\n"
                 f"{r.stderr.decode(errors='replace')}")
    return r.stdout.decode()


def lines_of(cmd, n, what="lines"):
    """The command's n JSON lines; exits with FAIL when it prints another count of `what`."""
    # Not splitlines(): that also splits at U+2028, U+0085, ... inside the JSON strings.
    out = [json.loads(line) for line in run(cmd).split("\n") if line]
    if len(out) != n:
        sys.exit(f"FAIL: {' '.join(cmd)} printed {len(out)} lines for {n} {what}")
    return out
