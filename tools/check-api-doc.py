#!/usr/bin/env python3
"""Fails when docs/api.md (or README.md's build-option table) drifts from what it documents.

docs/api.md is the human guide to the public headers, include/reel/*.h. This
reads the headers' declarations (comments and the C++-only branches dropped,
then top-level statements split at ';') and checks, in both directions:

- functions: every public function is named in code (`...` or a code block)
  outside the Index and listed in the Index table; a reel_* name in code that
  no header declares is reported;
- prototypes: a full prototype written in code (`reel_status reel_x(...)`, or
  in a ```c block) must be the header's, parameter names included;
- types: every public typedef is named in code, and in the Index;
- struct fields: every field of a public struct is named in code in a
  section (a heading and its text up to the next heading) that names the
  struct; a ```c block that defines a public struct or enum lists exactly
  its fields or values, in order; in a table with a column headed "fields",
  a row whose first cell is a public struct lists exactly its fields there;
  a column headed "field" names only fields of the structs its section names;
- enum values and macros: every value of a public enum and every macro
  (`_INIT` initialisers, limits, versions) is named in code; a `#define` in
  a ```c block has the header's body; a REEL_* name in code must be declared
  or at least named by a header's comment (REEL_BACKEND, the variable);
- counts in prose ("58 in reel.h") equal the headers' function counts, and
  a list `include/reel/{reel,memory,...}.h` names exactly the headers;
- README.md: the build-option table (`| option | values (default first) |`)
  names exactly the options of meson_options.txt, the default first and,
  for feature, boolean and combo options, exactly their values;
- folders and files that api.md names (`runtime/check.c`, `memory/`) exist,
  and no renamed folder (exec/, now runtime/) is named, when the root is a
  full checkout (it has meson.build).

Each mismatch is one line naming the file (header, api.md or README.md) and
the name. Python's standard library only; run by the test suite (tests/core,
tests api_doc and api_doc_self_test); also by hand:
    tools/check-api-doc.py [repository root]
    tools/check-api-doc.py --self-test [repository root]
"""
import glob
import os
import re
import shutil
import sys
import tempfile

HEADER_DIR = "include/reel"
API_DOC = "docs/api.md"
README = "README.md"
MESON_OPTIONS = "meson_options.txt"
INDEX_HEADING = "Index"
RENAMED = {"exec": "runtime"}  # folders renamed: a mention of the old name is stale

IDENT = re.compile(r"[A-Za-z_]\w*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


# ---- headers -------------------------------------------------------------------------------


class Api:
    def __init__(self):
        self.functions = {}  # name -> (header, prototype)
        self.types = {}      # name -> header
        self.structs = {}    # name -> (header, [fields])
        self.enums = {}      # name -> (header, [values])
        self.values = {}     # enum value -> header
        self.macros = {}     # name -> (header, [bodies]) (two for C and C++ forms)
        self.comment_words = set()  # every word of the headers, comments included

    def names(self):
        return set(self.functions) | set(self.types)


def norm(text):
    """Whitespace-insensitive form of a declaration or macro body."""
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"\s*([(){}\[\],;*=])\s*", r"\1", text)


def join_continuations(text):
    return re.sub(r"\\\n", " ", text)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def drop_cplusplus(lines):
    """Drops the lines of `#ifdef __cplusplus` branches (keeps their #else)."""
    out, stack = [], []  # stack of (is_cplusplus_block, in_else)
    for line in lines:
        s = line.strip()
        if re.match(r"#\s*if", s):
            stack.append((bool(re.match(r"#\s*(ifdef\s+__cplusplus|if\s+defined\s*\(?\s*__cplusplus)", s)), False))
            out.append("")
            continue
        if re.match(r"#\s*else", s) and stack:
            stack[-1] = (stack[-1][0], True)
            out.append("")
            continue
        if re.match(r"#\s*endif", s) and stack:
            stack.pop()
            out.append("")
            continue
        skipping = any(cpp and not in_else for cpp, in_else in stack)
        out.append("" if skipping else line)
    return out


def statements(code):
    """Top-level statements of C code without comments and preprocessor lines."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(code):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == ";" and depth == 0:
            out.append(code[start:i].strip())
            start = i + 1
    return [s for s in out if s]


def split_top(text, sep):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def field_names(body):
    names = []
    for decl in split_top(body, ";"):
        fn_ptr = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)
        if fn_ptr:
            names.append(fn_ptr.group(1))
            continue
        decl = re.sub(r"\[[^\]]*\]", "", decl)
        for part in split_top(decl, ","):
            m = re.search(r"(\w+)\s*$", part)
            if m:
                names.append(m.group(1))
    return names


def enum_values(body):
    return [re.match(r"\s*(\w+)", v).group(1) for v in split_top(body, ",") if re.match(r"\s*\w+", v)]


def parse_c(text, origin, api):
    """Adds the declarations of C text (a header, or a ```c block of the doc) to api."""
    raw = join_continuations(strip_comments(text))
    lines = drop_cplusplus(raw.split("\n"))
    # Macros, from every branch (the C and the C++ forms of an _INIT both count).
    guard = set(re.findall(r"^\s*#\s*ifndef\s+(\w+)\s*$", raw, flags=re.M))
    for m in re.finditer(r"^\s*#\s*define\s+(REEL_\w+)(\([^)]*\))?[ \t]*(.*)$", raw, flags=re.M):
        name, body = m.group(1), m.group(3).strip()
        if name in guard and not body:
            continue
        api.macros.setdefault(name, (origin, []))[1].append(norm(body))
    code = "\n".join("" if re.match(r"\s*#", l) else l for l in lines)
    for st in statements(code):
        one = re.sub(r"\s+", " ", st)
        m = re.match(r"typedef (struct|enum|union) (reel_\w+) ?\{(.*)\} ?(reel_\w+)$", one)
        if m:
            kind, name, body = m.group(1), m.group(4), m.group(3)
            api.types[name] = origin
            if kind == "enum":
                vals = enum_values(body)
                api.enums[name] = (origin, vals)
                for v in vals:
                    api.values[v] = origin
            else:
                api.structs[name] = (origin, field_names(body))
            continue
        m = re.match(r"typedef .*\( ?\* ?(reel_\w+) ?\) ?\(", one)
        if m:
            api.types[m.group(1)] = origin
            continue
        m = re.match(r"typedef .*?(reel_\w+)$", one)
        if m:
            api.types[m.group(1)] = origin
            continue
        if one.startswith("typedef") or one == "}":
            continue
        m = re.search(r"(reel_\w+) ?\(", one)
        if m and re.fullmatch(r"[\w\s*]+", one[: m.start()]) and not one.startswith("return"):
            api.functions[m.group(1)] = (origin, one)


def read_headers(root):
    api = Api()
    paths = sorted(glob.glob(os.path.join(root, HEADER_DIR, "*.h")))
    for path in paths:
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        parse_c(text, rel, api)
        api.comment_words |= set(IDENT.findall(text))
    return api, [os.path.relpath(p, root) for p in paths]


# ---- markdown ------------------------------------------------------------------------------


class Section:
    def __init__(self, heading, line):
        self.heading = heading  # the heading's text, without the #s
        self.line = line
        self.words = set()      # identifiers in code (spans, blocks, the heading's code)
        self.text = []          # (line number, line) outside code blocks
        self.c_blocks = []      # (line number, text) of ```c blocks


def code_words(span):
    """Identifiers of a piece of code, string literals left out."""
    return IDENT.findall(STRING.sub(" ", span))


def read_doc(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    sections = [Section("", 1)]
    fence, fence_lang, block, block_line = None, "", [], 0
    for n, line in enumerate(lines, 1):
        m = re.match(r"\s*(```+|~~~+)\s*(\w*)", line)
        if fence is None and m:
            fence, fence_lang, block, block_line = m.group(1), m.group(2).lower(), [], n + 1
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                text = "\n".join(block)
                sections[-1].words |= set(code_words(text))
                if fence_lang == "c":
                    sections[-1].c_blocks.append((block_line, text))
                fence = None
            else:
                block.append(line)
            continue
        h = re.match(r"(#{1,6})\s+(.*)$", line)
        if h:
            sections.append(Section(h.group(2).strip(), n))
        sections[-1].text.append((n, line))
        for span in re.findall(r"`([^`]+)`", line):
            sections[-1].words |= set(code_words(span))
    return sections


def spans_with_lines(section):
    for n, line in section.text:
        for span in re.findall(r"`([^`]+)`", line):
            yield n, span


def table_rows(section):
    """(line, header cells, cells) of every table row of the section, below its header."""
    header, rows = None, []
    for n, line in section.text:
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if header is None:
            header = cells
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            rows.append((n, header, cells))
    return rows


# ---- the checks ----------------------------------------------------------------------------


def check_api_doc(root, api, headers):
    bad = []
    doc = API_DOC
    sections = read_doc(os.path.join(root, doc))
    index = [s for s in sections if s.heading == INDEX_HEADING]
    body = [s for s in sections if s.heading != INDEX_HEADING]
    words = set().union(*(s.words for s in body))
    index_words = set().union(*(s.words for s in index)) if index else set()
    if not index:
        bad.append(f"{doc}: no '## {INDEX_HEADING}' section (the list of every public function and type)")

    # Forward: every public name is documented.
    for name, (hdr, _) in sorted(api.functions.items()):
        if name not in words:
            bad.append(f"{hdr}: function {name} is not documented in {doc}")
        elif index and name not in index_words:
            bad.append(f"{hdr}: function {name} is missing from the Index of {doc}")
    for name, hdr in sorted(api.types.items()):
        if name not in words:
            bad.append(f"{hdr}: type {name} is not documented in {doc}")
        elif index and name not in index_words:
            bad.append(f"{hdr}: type {name} is missing from the Index of {doc}")
    for name, (hdr, vals) in sorted(api.enums.items()):
        for v in vals:
            if v not in words:
                bad.append(f"{hdr}: enum value {v} ({name}) is not documented in {doc}")
    for name, (hdr, _) in sorted(api.macros.items()):
        if name not in words:
            kind = "initialiser macro" if name.endswith("_INIT") else "macro"
            bad.append(f"{hdr}: {kind} {name} is not documented in {doc}")
    for name, (hdr, fields) in sorted(api.structs.items()):
        near = set()
        for s in sections:
            if name in s.words:
                near |= s.words
        for f in fields:
            if f not in near:
                bad.append(f"{hdr}: field {name}.{f} is not documented in {doc} "
                           f"(in a section that names {name})")

    # Reverse: names in the doc's code that the headers do not have.
    known = api.names()
    seen = set()
    for s in sections:
        for n, span in spans_with_lines(s):
            for w in code_words(span):
                if w in seen:
                    continue
                if unknown_name(w, known, api):
                    seen.add(w)
                    bad.append(f"{doc}:{n}: {w} is named as API, but no header in {HEADER_DIR}/ declares it")
        for line, text in s.c_blocks:
            for w in code_words(strip_comments(text)):
                if w not in seen and unknown_name(w, known, api):
                    seen.add(w)
                    bad.append(f"{doc}:{line}: {w} (```c block) is named as API, but no header in "
                               f"{HEADER_DIR}/ declares it")

    bad += check_c_blocks(sections, api, doc)
    bad += check_prototype_spans(sections, api, doc)
    bad += check_struct_rows(sections, api, doc)
    bad += check_field_columns(sections, api, doc)
    bad += check_counts(sections, api, headers, doc)
    if os.path.exists(os.path.join(root, "meson.build")):
        bad += check_paths(root, sections, doc)
    return bad


def unknown_name(w, known, api):
    if w.startswith("reel_") and not w.endswith("_"):
        return w not in known
    if w.startswith("REEL_") and not w.endswith("_"):
        return w not in api.values and w not in api.macros and w not in api.comment_words
    return False


def check_c_blocks(sections, api, doc):
    """A ```c block that defines a public struct, macro or function must agree with the header."""
    bad = []
    for s in sections:
        for line, text in s.c_blocks:
            quoted = Api()
            parse_c(text, doc, quoted)
            for name, (_, fields) in quoted.structs.items():
                if name in api.structs and fields != api.structs[name][1]:
                    hdr, want = api.structs[name]
                    missing = [f for f in want if f not in fields]
                    extra = [f for f in fields if f not in want]
                    what = []
                    if missing:
                        what.append("lacks " + ", ".join(missing))
                    if extra:
                        what.append("has " + ", ".join(extra) + ", which the header does not")
                    if not what:
                        what.append(f"has the fields in another order than {hdr}")
                    bad.append(f"{doc}:{line}: {hdr}: struct {name} quoted in a ```c block "
                               + "; ".join(what))
            for name, (_, vals) in quoted.enums.items():
                if name in api.enums and vals != api.enums[name][1]:
                    bad.append(f"{doc}:{line}: {api.enums[name][0]}: enum {name} quoted in a ```c block "
                               f"has {', '.join(vals)}; the header: {', '.join(api.enums[name][1])}")
            for name, (_, bodies) in quoted.macros.items():
                if name in api.macros and not set(bodies) <= set(api.macros[name][1]):
                    bad.append(f"{doc}:{line}: {api.macros[name][0]}: macro {name} quoted in a ```c block "
                               f"is not the header's ({api.macros[name][1][-1]})")
            for name, (_, proto) in quoted.functions.items():
                if name in api.functions and norm(proto) != norm(api.functions[name][1]):
                    bad.append(f"{doc}:{line}: {api.functions[name][0]}: prototype of {name} in a ```c "
                               f"block differs from the header's: {api.functions[name][1]}")
    return bad


PROTO = re.compile(r"^((?:const\s+)?(?:unsigned\s+)?\w+[\s*]+)(reel_\w+)\s*\((.*)\)$")


def check_prototype_spans(sections, api, doc):
    """`type reel_x(params)` in the text must be the header's prototype."""
    bad = []
    for s in sections:
        for n, span in spans_with_lines(s):
            m = PROTO.match(span.strip())
            if not m or m.group(2) not in api.functions:
                continue
            hdr, proto = api.functions[m.group(2)]
            if norm(span) != norm(proto):
                bad.append(f"{doc}:{n}: {hdr}: prototype of {m.group(2)} differs from the header's: {proto}")
    return bad


def backticked(cell):
    return [c.strip() for c in re.findall(r"`([^`]+)`", cell)]


def check_struct_rows(sections, api, doc):
    """In a table with a column of fields, a row whose first cell is `reel_struct` lists
    exactly that struct's fields there."""
    bad = []
    for s in sections:
        for n, header, cells in table_rows(s):
            first = backticked(cells[0])
            if len(first) != 1 or first[0] not in api.structs or cells[0] != f"`{first[0]}`":
                continue
            columns = [i for i, h in enumerate(header) if i > 0 and i < len(cells) and "field" in h.lower()]
            if not columns:
                continue
            hdr, fields = api.structs[first[0]]
            listed = []
            for i in columns:
                for w in backticked(cells[i]):
                    if re.fullmatch(r"[a-z_]\w*", w) and w not in api.names():
                        listed.append(w)
            missing = [f for f in fields if f not in listed]
            extra = [f for f in listed if f not in fields]
            for f in missing:
                bad.append(f"{doc}:{n}: {hdr}: the row of {first[0]} does not list its field {f}")
            for f in extra:
                bad.append(f"{doc}:{n}: the row of {first[0]} lists {f}, which is not a field of it in {hdr}")
    return bad


def check_field_columns(sections, api, doc):
    """A `field` column of a table names fields of the structs its section names."""
    bad = []
    for s in sections:
        structs = [t for t in api.structs if t in s.words]
        if not structs:
            continue
        fields = set().union(*(api.structs[t][1] for t in structs))
        for n, header, cells in table_rows(s):
            col = next((i for i, h in enumerate(header) if h.lower() == "field"), None)
            if col is None or col >= len(cells):
                continue
            for w in backticked(cells[col]):
                name = re.sub(r"\[.*", "", w)
                if re.fullmatch(r"[a-z_]\w*", name) and name not in fields:
                    bad.append(f"{doc}:{n}: {name} is described as a field of {' / '.join(structs)}, "
                               f"which has no such field")
    return bad


def check_counts(sections, api, headers, doc):
    """'58 in reel.h', '58 functions in reel.h': the headers' function counts."""
    count = {}
    for hdr, _ in api.functions.values():
        count[os.path.basename(hdr)] = count.get(os.path.basename(hdr), 0) + 1
    bad = []
    pat = re.compile(r"\b(\d+)\s+(?:public\s+)?(?:functions?\s+)?in\s+`?(?:include/reel/)?(\w+\.h)\b")
    for s in sections:
        for n, line in s.text:
            for m in pat.finditer(line):
                want = count.get(m.group(2), 0)
                if int(m.group(1)) != want:
                    bad.append(f"{doc}:{n}: says {m.group(1)} functions in {m.group(2)}, "
                               f"include/reel/{m.group(2)} declares {want}")
    return bad


def check_paths(root, sections, doc):
    """Folders and files of the tree that the text names must exist (exec/ became runtime/)."""
    tops = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")}
    tops |= set(RENAMED)
    bad = []
    for s in sections:
        for n, line in s.text:
            line = re.sub(r"\]\([^)]*\)", "]", line)  # links are checked by their own reader
            for m in re.finditer(r"(?<![\w./-])([a-z_]+)/([\w.*-]*(?:/[\w.*-]+)*)", line):
                if m.group(1) not in tops or m.group(1) == "build":
                    continue
                path = m.group(0).rstrip(".")
                if m.group(1) in RENAMED:
                    bad.append(f"{doc}:{n}: names {path}: {m.group(1)}/ was renamed {RENAMED[m.group(1)]}/")
                elif not glob.glob(os.path.join(root, path)):
                    bad.append(f"{doc}:{n}: names {path}, which is not in the tree")
    return bad


def check_header_lists(root, headers):
    """`include/reel/{reel,memory,...}.h` in api.md or README.md lists exactly the headers."""
    have = sorted(os.path.splitext(os.path.basename(h))[0] for h in headers)
    bad = []
    for rel in (API_DOC, README):
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in re.finditer(r"include/reel/\{([\w, ]+)\}\.h", line):
                    listed = sorted(x.strip() for x in m.group(1).split(","))
                    if listed != have:
                        bad.append(f"{rel}:{n}: lists the headers {{{m.group(1)}}}, {HEADER_DIR}/ has "
                                   f"{{{','.join(have)}}}")
    return bad


# ---- README's build options ----------------------------------------------------------------


def meson_options(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    opts = {}
    for m in re.finditer(r"option\s*\((.*?)\)\s*(?=option\s*\(|$)", text, flags=re.S):
        args = m.group(1)
        name = re.match(r"\s*'([^']+)'", args).group(1)
        kind = re.search(r"type\s*:\s*'(\w+)'", args).group(1)
        value = re.search(r"value\s*:\s*('[^']*'|true|false|\d+)", args)
        value = value.group(1).strip("'") if value else None
        choices = re.search(r"choices\s*:\s*\[([^\]]*)\]", args)
        if kind == "feature":
            values = ["auto", "enabled", "disabled"]
            value = value or "auto"
        elif kind == "boolean":
            values = ["true", "false"]
            value = value or "true"
        elif choices:
            values = re.findall(r"'([^']*)'", choices.group(1))
        else:
            values = None  # string, integer: any value
        opts[name] = (kind, value, values)
    return opts


def check_readme(root):
    bad = []
    readme, meson = os.path.join(root, README), os.path.join(root, MESON_OPTIONS)
    if not os.path.exists(readme) or not os.path.exists(meson):
        return bad
    opts = meson_options(meson)
    rows = []
    for s in read_doc(readme):
        for n, header, cells in table_rows(s):
            if header[0].lower() == "option" and cells and re.fullmatch(r"`-D\w+`", cells[0]):
                rows.append((n, header, cells))
    if not rows:
        return [f"{README}: no build-option table (| option | values (default first) | ...) found"]
    listed = set()
    for n, header, cells in rows:
        name = cells[0].strip("`")[2:]
        listed.add(name)
        if name not in opts:
            bad.append(f"{README}:{n}: option -D{name} is not in {MESON_OPTIONS}")
            continue
        kind, value, values = opts[name]
        given = backticked(cells[1]) if len(cells) > 1 else []
        if not given or given[0] != value:
            bad.append(f"{README}:{n}: option -D{name}: the default is {value} in {MESON_OPTIONS}, "
                       f"the table lists {', '.join(given) or 'nothing'} first")
        elif values is not None and sorted(given) != sorted(values):
            bad.append(f"{README}:{n}: option -D{name}: {MESON_OPTIONS} allows {', '.join(values)}, "
                       f"the table lists {', '.join(given)}")
    for name in sorted(set(opts) - listed):
        bad.append(f"{MESON_OPTIONS}: option {name} is missing from the build-option table of {README}")
    return bad


# ---- driver --------------------------------------------------------------------------------


def check(root):
    api, headers = read_headers(root)
    if not api.functions:
        return [f"{HEADER_DIR}: no public function found"]
    return check_api_doc(root, api, headers) + check_readme(root) + check_header_lists(root, headers)


def self_test(root):
    """The check passes on the tree, and fails, naming it, on each seeded drift of a copy."""
    failures = []
    real = check(root)
    if real:
        failures.append(f"the tree itself fails the check ({len(real)} mismatch(es))")
    api, _ = read_headers(root)
    name = "reel_plan_graph_kernels" if "reel_plan_graph_kernels" in api.functions else sorted(api.functions)[0]
    struct = "reel_compile_opts" if "reel_compile_opts" in api.structs else sorted(api.structs)[0]
    field = api.structs[struct][1][-1]
    seeds = [
        (f"a public function ({name}) deleted from {API_DOC}",
         API_DOC, lambda t: re.sub(rf"\b{name}\b", "", t), rf"function {name} is not documented"),
        (f"a field ({struct}.{field}) deleted from {API_DOC}",
         API_DOC, lambda t: re.sub(rf"\b{field}\b", "", t), rf"field {struct}\.{field} is not documented"),
        (f"a function that no header declares added to {API_DOC}",
         API_DOC, lambda t: t + "\n`reel_plan_frobnicate(p)` does nothing.\n",
         r"reel_plan_frobnicate is named as API"),
        (f"a wrong count in {API_DOC}",
         API_DOC, lambda t: t + f"\nThere are {len(api.functions) + 100} in reel.h.\n", r"functions in reel\.h"),
        (f"a build option deleted from {README}'s table",
         README, lambda t: re.sub(r"^\| `-Dtests` .*\n", "", t, flags=re.M), r"option tests is missing"),
    ]
    tmp = tempfile.mkdtemp(prefix="check-api-doc.")
    try:
        for what, target, mutate, expect in seeds:
            for rel in [API_DOC, README, MESON_OPTIONS] + [os.path.join(HEADER_DIR, os.path.basename(h))
                                                           for h in glob.glob(os.path.join(root, HEADER_DIR, "*.h"))]:
                os.makedirs(os.path.dirname(os.path.join(tmp, rel)) or tmp, exist_ok=True)
                shutil.copyfile(os.path.join(root, rel), os.path.join(tmp, rel))
            with open(os.path.join(tmp, target), encoding="utf-8") as f:
                text = f.read()
            changed = mutate(text)
            if changed == text:
                failures.append(f"seed '{what}' changed nothing")
                continue
            with open(os.path.join(tmp, target), "w", encoding="utf-8") as f:
                f.write(changed)
            got = check(tmp)
            hits = [b for b in got if re.search(expect, b) and b not in real]
            if hits:
                print(f"self-test: {what}: found: {hits[0]}")
            else:
                failures.append(f"seed '{what}' was not reported (/{expect}/); the check said: {got}")
    finally:
        shutil.rmtree(tmp)
    for f in failures:
        print("self-test: FAIL: " + f)
    print("self-test: " + ("failed" if failures else "the tree passes and every seeded drift is reported"))
    return 1 if failures else 0


def main():
    args = sys.argv[1:]
    selftest = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if selftest:
        return self_test(root)
    bad = check(root)
    for b in bad:
        print(b)
    print(f"api-doc: {len(bad)} mismatch(es) between the headers and {API_DOC} / {README}" if bad
          else f"api-doc: {API_DOC} and {README} match {HEADER_DIR}/*.h and {MESON_OPTIONS}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
