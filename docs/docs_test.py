"""Checks README.md and the user documents under docs/.

- README.md has at most 300 lines.
- Every command in README.md's shell blocks is run by one of RUNNERS: it is
  one of them, or it appears in one as a whole command (continuation lines
  joined, spaces collapsed). docs/quickstart_test.sh runs the quick start.
- The README's quoted Python loops (its ```diff block) are those of
  examples/train.py: each side of the diff is a run of lines of the file.
- No user document names an issue, a session, "this stop" or a date.
- Every relative link resolves to a file, and an anchor to a heading of it.

Run from the repository root (or the test's runfiles): python3 docs/docs_test.py
"""

import glob
import os
import re
import sys
import tempfile
import unittest

MAX_README_LINES = 300
RUNNERS = ["tools/run_demo.sh", "tools/test.sh", ".ci/run",
           "docs/quickstart_test.sh"]
SHELL_FENCES = {"sh", "bash", "shell", "console"}
BANNED = [re.compile(p, re.IGNORECASE) for p in (
    r"\bissue [0-9]", r"\bsession [0-9]", r"\bthis stop\b",
    r"\b20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]\b")]


def user_docs():
    return ["README.md"] + sorted(glob.glob("docs/*.md"))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def fenced_blocks(text):
    """(language, [lines], first line number) of each ``` block."""
    blocks, lang, lines, start = [], None, [], 0
    for number, line in enumerate(text.split("\n"), 1):
        if lang is None:
            m = re.match(r"^```\s*([\w+-]*)", line)
            if m:
                lang, lines, start = m.group(1), [], number + 1
        elif re.match(r"^```\s*$", line):
            blocks.append((lang, lines, start))
            lang = None
        else:
            lines.append(line)
    return blocks


def logical_lines(lines):
    """Lines with their backslash continuations joined, comments and blank
    lines dropped, runs of spaces collapsed."""
    out, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        line = re.sub(r"(^|\s)#(\s.*)?$", "", line)  # a trailing comment
        line = " ".join(line.split())
        if line:
            out.append(line)
    if pending.strip():
        out.append(" ".join(pending.split()))
    return out


def readme_commands(readme):
    """(line number, command) of every command in the shell blocks."""
    commands = []
    for lang, lines, start in fenced_blocks(readme):
        if lang in SHELL_FENCES:
            for command in logical_lines(lines):
                commands.append((start, command))
    return commands


def is_run_by(command, runners):
    """Whether `command` invokes a runner, or is a whole command of one.
    `runners` maps a runner's path to its text."""
    if command.split()[0] in runners:
        return True
    whole = re.compile(r"(^|[\s{(;|&])" + re.escape(command) +
                       r"($|[\s;|&)}])")
    return any(whole.search(line) for text in runners.values()
               for line in logical_lines(text.split("\n")))


def uncovered_commands(readme, runners):
    return [(n, c) for n, c in readme_commands(readme)
            if not is_run_by(c, runners)]


def diff_side(lines, side):
    return "\n".join(line[1:] for line in lines
                     if line and (line[0] == " " or line[0] == side)) + "\n"


def misquoted_loops(readme, source):
    """The sides of the README's diff of train.py's loops not in `source`."""
    problems = []
    loops = [lines for lang, lines, _ in fenced_blocks(readme)
             if lang == "diff" and any("def train_" in l for l in lines)]
    if not loops:
        return ["README.md quotes no training loop (a ```diff of def train_...)"]
    for lines in loops:
        for side in "-+":
            if diff_side(lines, side) not in source:
                problems.append("the '%s' side of the README's diff is not a "
                                "run of lines of examples/train.py" % side)
    return problems


def banned_phrases(path, text):
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        for pattern in BANNED:
            m = pattern.search(line)
            if m:
                found.append("%s:%d: %r" % (path, number, m.group(0)))
    return found


def prose(text):
    """The text without its fenced blocks and inline code spans."""
    kept, in_fence = [], False
    for line in text.split("\n"):
        if re.match(r"^```", line):
            in_fence = not in_fence
            kept.append("")
            continue
        kept.append("" if in_fence else re.sub(r"`[^`]*`", "", line))
    return kept


def slug(heading):
    """GitHub's anchor for a heading."""
    heading = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for line in prose_with_code_headings(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else "%s-%d" % (base, count))
    return out


def prose_with_code_headings(text):
    """Lines outside fenced blocks, inline code kept (headings use it)."""
    kept, in_fence = [], False
    for line in text.split("\n"):
        if re.match(r"^```", line):
            in_fence = not in_fence
            continue
        if not in_fence:
            kept.append(line)
    return kept


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def broken_links(path, text, root):
    """Relative links of `path` (relative to `root`) that do not resolve."""
    broken = []
    here = os.path.dirname(path)
    for number, line in enumerate(prose(text), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(here, file)) if file \
                else path
            where = "%s:%d: %s" % (path, number, target)
            full = os.path.join(root, resolved)
            if resolved.startswith("..") or not os.path.isfile(full):
                broken.append(where + " (no such file; if it exists, add it "
                              "to //docs:docs_test's data)")
            elif anchor and resolved.endswith(".md") and \
                    anchor not in anchors(read(full)):
                broken.append(where + " (no such heading)")
    return broken


class DocsTest(unittest.TestCase):
    maxDiff = None

    def test_readme_is_short(self):
        lines = read("README.md").count("\n")
        self.assertLessEqual(lines, MAX_README_LINES,
                             "README.md has %d lines; move the detail to "
                             "docs/" % lines)

    def test_every_readme_command_is_run(self):
        runners = {path: read(path) for path in RUNNERS}
        readme = read("README.md")
        self.assertGreater(len(readme_commands(readme)), 0)
        uncovered = uncovered_commands(readme, runners)
        self.assertEqual(uncovered, [],
                         "README.md commands run by none of %s (add them to "
                         "docs/quickstart_test.sh, or take them out)"
                         % ", ".join(RUNNERS))

    def test_readme_quotes_the_python_loops(self):
        self.assertEqual(misquoted_loops(read("README.md"),
                                         read("examples/train.py")), [])

    def test_no_issue_numbers_sessions_or_dates(self):
        found = [f for path in user_docs()
                 for f in banned_phrases(path, read(path))]
        self.assertEqual(found, [])

    def test_relative_links_resolve(self):
        self.assertIn("docs/RESULTS.md", user_docs())
        broken = [b for path in user_docs()
                  for b in broken_links(path, read(path), ".")]
        self.assertEqual(broken, [])


class CheckersFailTest(unittest.TestCase):
    """Each check above flags what it is there to flag."""

    def test_a_command_no_runner_runs(self):
        readme = ("```sh\ntools/test.sh   # all tests\n"
                  "bazel-bin/x --a=1 \\\n    --b=2 &\nrm -rf /\n```\n")
        runners = {"tools/test.sh": "", "q.sh": "{\nbazel-bin/x --a=1 \\\n"
                   "  --b=2 &\n} 2>log\nrm -rf /tmp/x\n"}
        self.assertEqual(uncovered_commands(readme, runners),
                         [(2, "rm -rf /")])

    def test_a_misquoted_loop(self):
        readme = "```diff\n def train_plain():\n-    a = 1\n+    a = 2\n```\n"
        self.assertEqual(misquoted_loops(readme, "def train_plain():\n"
                                         "    a = 1\n"),
                         ["the '+' side of the README's diff is not a run of "
                          "lines of examples/train.py"])

    def test_banned_phrases(self):
        text = "fixed in issue 12\nsession 11 notes\nthis stop\n2026-12-01\nok"
        self.assertEqual(len(banned_phrases("x.md", text)), 4)
        self.assertEqual(banned_phrases("x.md", "session 'old' is not"), [])

    def test_broken_links(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "A.md"), "w") as f:
                f.write("# A\n## The `x` part: y\n")
            text = ("[ok](A.md) [ok](A.md#the-x-part-y) [no](B.md) "
                    "[no](A.md#nope) [web](https://example.com)\n"
                    "`[code](C.md)`\n```\n[code](D.md)\n```\n")
            broken = broken_links("docs/A.md", text, root)
            self.assertEqual(len(broken), 2, broken)
            self.assertIn("B.md", broken[0])
            self.assertIn("no such heading", broken[1])

    def test_a_long_readme(self):
        with tempfile.TemporaryDirectory() as root:
            cwd = os.getcwd()
            os.chdir(root)
            try:
                with open("README.md", "w") as f:
                    f.write("x\n" * (MAX_README_LINES + 1))
                result = unittest.TestResult()
                DocsTest("test_readme_is_short").run(result)
                self.assertEqual(len(result.failures), 1)
            finally:
                os.chdir(cwd)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
