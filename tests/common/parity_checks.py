"""The tally of a parity script's checks (tests/image/*_parity.py): expect() counts a check and
prints and records it when it fails; exit_if_failed() ends the script with the count."""
import sys


class Checks:
    def __init__(self):
        self.count = 0
        self.failures = []

    def expect(self, cond, what):
        self.count += 1
        if not cond:
            self.failures.append(what)
            print("FAIL:", what)
        return cond

    def exit_if_failed(self, prefix=""):
        """Exits with "N of M checks failed" (after `prefix`) when any check failed."""
        if self.failures:
            sys.exit(f"{prefix}{len(self.failures)} of {self.count} checks failed")
