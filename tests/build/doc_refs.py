#!/usr/bin/env python3
"""doc_refs.py ROOT -- every reference to a part of the docs names one that
exists.

Comments, docs and messages point readers at a section as
`docs/<name>.md, "Section"` (or without the comma, or `README.md`).  Such a
reference must name a file that exists (as must any mention of a
docs/ file) and a part of it: a heading, a bold
term (`**Standby shims.**`) or the first cell of a table row, that starts
with the quoted words (case, backticks and line breaks ignored).  Exit 0
clean, 1 a dangling reference (each printed with where it is and what the
file offers closest to it), 2 a usage error.  Files that are not UTF-8
text are skipped.

doc_refs.py --self-test ROOT: on a copy of ROOT's docs/ and src/, the clean
copy must pass; with a probe file added that names a part that does not
exist it must fail naming it, and again with the probe naming a docs/ file
that does not exist.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SCAN = ("README.md", "docs", "src", "include", "python", "tests", "bench",
        "examples", "scripts", "cmake", "Makefile", "CMakeLists.txt")
SKIP_DIRS = {".git", "__pycache__"}  # build trees are not under SCAN
TEXT_EXT = (".md", ".c", ".h", ".py", ".sh", ".txt", ".cmake", ".cu", "")
# `docs/<x>.md, "Part"`, the quote possibly on the next line of a comment
REF = re.compile(r'\b((?:docs/[A-Za-z0-9_\-]+|README)\.md),?\s+"([^"\n]+(?:\n[^"\n]*){0,2}?)"')
# any mention of a doc file
FILE = re.compile(r"\b(docs/[A-Za-z0-9_\-]+\.md)\b")
# what continues a comment or a Markdown paragraph onto the next line
LEADER = re.compile(r"\n[ \t]*(?:#+|\*|//|--)?[ \t]*")


def norm(s):
    s = LEADER.sub(" ", s).replace("`", "").replace("*", "")
    return re.sub(r"\s+", " ", s).strip().strip(".,:;").lower()


def anchors(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                out.append(norm(line.lstrip("#")))
            elif line.startswith("|"):
                cells = line.strip().strip("|").split("|")
                if cells and not set(cells[0].strip()) <= set("-: "):
                    out.append(norm(cells[0]))
            for b in re.findall(r"\*\*([^*]+)\*\*", line):
                out.append(norm(b))
    return [a for a in out if a]


def files(root):
    for top in SCAN:
        p = os.path.join(root, top)
        if os.path.isfile(p):
            yield p
            continue
        for d, dirs, names in os.walk(p):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            for n in sorted(names):
                if os.path.splitext(n)[1] in TEXT_EXT:
                    yield os.path.join(d, n)


def check(root):
    cache, bad = {}, []
    for path in files(root):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for m in FILE.finditer(text):
            if not os.path.isfile(os.path.join(root, m.group(1))):
                bad.append("%s:%d: %s does not exist" % (
                    os.path.relpath(path, root), text.count("\n", 0, m.start()) + 1,
                    m.group(1)))
        for m in REF.finditer(text):
            doc, part = m.group(1), norm(m.group(2))
            if not part or len(part) > 120:
                continue
            line = text.count("\n", 0, m.start()) + 1
            where = "%s:%d" % (os.path.relpath(path, root), line)
            target = os.path.join(root, doc)
            if doc not in cache:
                cache[doc] = anchors(target) if os.path.isfile(target) else None
            have = cache[doc]
            if have is None:
                continue                 # said by the mention check above
            if not any(a.startswith(part) for a in have):
                near = [a for a in have if any(w in a for w in part.split() if len(w) > 3)]
                bad.append('%s: %s has no part "%s"%s' % (
                    where, doc, part,
                    "; closest: " + "; ".join('"%s"' % a[:60] for a in near[:3]) if near else ""))
    return bad


def self_test(root):
    tmp = tempfile.mkdtemp(prefix="fb-docrefs.")
    try:
        t = os.path.join(tmp, "t")
        os.mkdir(t)
        for d in ("docs", "src"):
            shutil.copytree(os.path.join(root, d), os.path.join(t, d))
        me = os.path.abspath(__file__)
        rc = subprocess.run([sys.executable, me, t], capture_output=True, text=True).returncode
        if rc != 0:
            print("FAIL: the clean copy was rejected (exit %d)" % rc)
            return 1
        probe = os.path.join(t, "src", "probe.c")
        with open(probe, "w") as f:
            # (split: this file is in the tree it checks)
            f.write('/* see docs/supervisor' + '.md, "No such\n * part here" */\n')
        r = subprocess.run([sys.executable, me, t], capture_output=True, text=True)
        if r.returncode != 1 or 'src/probe.c:1: docs/supervisor.md has no part "no such part here"' \
                not in r.stdout:
            print("FAIL: a dangling reference was not reported (exit %d): %s"
                  % (r.returncode, r.stdout))
            return 1
        with open(probe, "w") as f:
            f.write('/* see docs/nosuch' + '.md, "Anything" */\n')
        r = subprocess.run([sys.executable, me, t], capture_output=True, text=True)
        if r.returncode != 1 or ("src/probe.c:1: docs/nosuch" + ".md does not exist") \
                not in r.stdout:
            print("FAIL: a missing file was not reported (exit %d): %s" % (r.returncode, r.stdout))
            return 1
        print("doc_refs self-test: ok")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return self_test(argv[2])
    if len(argv) != 2 or not os.path.isdir(os.path.join(argv[1], "docs")):
        print("usage: doc_refs.py ROOT | --self-test ROOT (ROOT has docs/)", file=sys.stderr)
        return 2
    bad = check(argv[1])
    for b in bad:
        print(b)
    if not bad:
        print("doc references: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
