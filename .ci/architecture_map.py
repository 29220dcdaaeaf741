#!/usr/bin/env python3
"""Checks that ARCHITECTURE.md is a map that is still true of the code.

- it stays short (at most MAX_LINES lines);
- every file or directory it names in backticks (`store/`, `claim.rs`, `tests/ctrl_c.rs`) is
  in the repository;
- every Rust name it names in backticks (`JobPolicy`, `runs_claim`, `JobPolicy::from_stored`)
  is a word of some source file.

Run from the repository's root: python3 .ci/architecture_map.py
"""

import os
import re
import subprocess
import sys

MAX_LINES = 450
DOC = "ARCHITECTURE.md"
SOURCE_SUFFIXES = (".rs", ".js", ".py", ".toml", ".sql", ".html", ".css", ".yaml", ".yml", ".sh")
# Names the map uses that are not ours: crates, other projects' items, SQL and shell words.
NOT_OURS = {
    "pg_try_advisory_xact_lock",
    "GET_LOCK",
    "SET_LOCAL",
    "TCP_NODELAY",
    "CronExpression",
    "FromRow",
    "AssertSqlSafe",
    "CancellationToken",
    "TaskTracker",
    "disallowed_methods",
    "rustls_no_provider",
    "raw_sql",
    "query_as",
}


def files():
    listed = subprocess.run(
        ["git", "ls-files"], check=True, capture_output=True, text=True
    ).stdout.split()
    return [f for f in listed if not f.startswith("target/")]


def main():
    text = open(DOC, encoding="utf-8").read()
    lines = text.count("\n")
    problems = []
    if lines > MAX_LINES:
        problems.append(f"{DOC} has {lines} lines; the map keeps to {MAX_LINES}")

    paths = files()
    words = set()
    for path in paths:
        if path.endswith(SOURCE_SUFFIXES):
            try:
                words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", open(path, encoding="utf-8").read()))
            except (UnicodeDecodeError, FileNotFoundError):
                pass

    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.strip()
        if re.fullmatch(r"[\w.\-/{},*<>]+/|[\w.\-/{},*<>]+\.(rs|js|py|css|html|sql|toml|md|json)", token):
            if not path_exists(token, paths):
                problems.append(f"names `{token}`, which is not in the repository")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*", token):
            for part in token.split("::"):
                if is_rust_name(part) and part not in words and part not in NOT_OURS:
                    problems.append(f"names `{token}`, but no source file has `{part}`")

    for problem in problems:
        print(f"{DOC}: {problem}")
    if problems:
        sys.exit(1)
    print(f"{DOC}: {lines} lines, every file and name it gives is there")


def is_rust_name(word):
    """CamelCase types and snake_case functions; plain words and SQL keywords are prose."""
    camel = re.fullmatch(r"[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*", word)
    snake = "_" in word and word == word.lower() and not word.startswith("_")
    return bool(camel or snake)


def path_exists(token, paths):
    """`{a,b}` alternatives each must exist; a path matches a repository path ending with it."""
    if token.startswith("../"):
        return os.path.exists(token)
    braces = re.search(r"\{([^}]*)\}", token)
    if braces:
        return all(
            path_exists(token[: braces.start()] + alt + token[braces.end():], paths)
            for alt in braces.group(1).split(",")
        )
    if "<" in token or "*" in token:
        pattern = re.escape(token).replace(r"\<", "<").replace(r"\>", ">")
        pattern = re.sub(r"<[^>]*>", r"[^/]+", pattern).replace(r"\*", r"[^/]*")
        return any(re.search(r"(^|/)" + pattern, p) for p in paths)
    if token.endswith("/"):
        return any(p.startswith(token) or f"/{token}" in p for p in paths)
    return any(p == token or p.endswith("/" + token) for p in paths)


if __name__ == "__main__":
    main()
