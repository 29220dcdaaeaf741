#!/usr/bin/env python3
"""The README's list of ignored tests, from what a plain `cargo test --workspace` printed.

Every test a plain run ignores must say what it needs (`#[ignore = "needs …"]`); the README
lists each reason with its number of tests and their files, between two markers. `.ci/run`
checks that list against its own run, so it cannot drift:

    python3 .ci/ignored_tests.py README.md TEST_LOG            # check
    python3 .ci/ignored_tests.py --write README.md TEST_LOG    # rewrite the list
"""

import re
import sys

BEGIN = "<!-- ignored tests: written by .ci/ignored_tests.py from a test run -->"
END = "<!-- end of ignored tests -->"

RUNNING = re.compile(r"^\s+Running (?:unittests )?(\S+) \(")
DOC_TESTS = re.compile(r"^\s+Doc-tests (\S+)")
IGNORED = re.compile(r"^test (.+?) \.\.\. ignored(?:, (.*))?$")


def ignored_by_reason(log_lines):
    """{reason: [(file, test)]} and the tests ignored without a reason."""
    by_reason, unexplained = {}, []
    where = "?"
    for line in log_lines:
        line = line.rstrip("\n")
        if m := RUNNING.match(line):
            where = m.group(1)
        elif m := DOC_TESTS.match(line):
            where = f"doc-tests of {m.group(1)}"
        elif m := IGNORED.match(line):
            test, reason = m.group(1), m.group(2)
            file = file_of(where, test)
            if reason and reason.startswith("needs "):
                by_reason.setdefault(reason, []).append((file, test))
            else:
                unexplained.append(f"{file}: {test}")
    return by_reason, unexplained


def file_of(binary, test):
    """A test binary of many suites (`tests/it/main.rs`) names each by its first module."""
    if binary.endswith("/main.rs") and "::" in test:
        return binary.removesuffix("main.rs") + test.split("::")[0] + ".rs"
    return binary


def table(by_reason):
    rows = ["| needs | tests | in |", "|---|---|---|"]
    for reason in sorted(by_reason):
        tests = by_reason[reason]
        files = sorted({f for f, _ in tests})
        rows.append(
            f"| {reason.removeprefix('needs ')} | {len(tests)} | "
            + ", ".join(f"`{f}`" for f in files)
            + " |"
        )
    total = sum(len(t) for t in by_reason.values())
    rows.append(f"| in all | {total} | |")
    return "\n".join(rows)


def main(argv):
    write = "--write" in argv
    args = [a for a in argv if a != "--write"]
    if len(args) != 2:
        sys.exit(__doc__)
    readme_path, log_path = args
    with open(log_path, encoding="utf-8", errors="replace") as f:
        by_reason, unexplained = ignored_by_reason(f)
    if unexplained:
        sys.exit(
            "error: these tests are ignored without saying what they need "
            '(#[ignore = "needs …"]):\n  ' + "\n  ".join(unexplained)
        )
    if not by_reason:
        sys.exit(f"error: {log_path} shows no ignored test: is it a plain `cargo test` log?")
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        sys.exit(f"error: {readme_path} has no list between {BEGIN!r} and {END!r}")
    written = readme[start + len(BEGIN) : end].strip()
    wanted = table(by_reason)
    if written == wanted:
        return
    if write:
        with open(readme_path, "w", encoding="utf-8") as f:
            f.write(readme[: start + len(BEGIN)] + "\n" + wanted + "\n" + readme[end:])
        print(f"{readme_path}: the list of ignored tests is rewritten")
        return
    sys.exit(
        f"error: {readme_path}'s list of ignored tests is not what this run ignored.\n"
        f"It says:\n{written}\n\nThe run ignored:\n{wanted}\n\n"
        f"Rewrite it with: python3 .ci/ignored_tests.py --write {readme_path} <a test log>"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
