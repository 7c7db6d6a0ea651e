#!/usr/bin/env python3
"""Every file and code name a Markdown document quotes must exist, so that the docs cannot drift.

The document's inline code spans (`...`, not fenced blocks) are read; each one that looks like one
of these is checked, anything else (messages, numbers, routes, placeholders) is passed over:

  a path        contains '/' (not at its start, no "://", no placeholder <...>), or ends in .cpp,
                .hpp, .py, .md, .sh, .cmake or .txt: some file of the repository must be at that
                path, or end in "/PATH" (`support/net_lab.hpp`, `codec_client.cpp`); a directory
                (`mock_server/ha/`) must hold a file; `*` matches as in a shell glob;
                <hf3fs_meta/x.hpp> is include/hf3fs_meta/x.hpp
  a flag        --word (alone, or in a command line): the source must spell it somewhere (its
                option's definition), outside Markdown
  a C++ name    Foo::bar, snake_case, CamelCase, ALL_CAPS, name(...), name<...>, "json_field": each
                ::-separated part must be a whole word (as `git grep -w`) of a source file
  a hyphenated  hf3fs-meta-proxy, X-Request-Id (one of ours: hf3fs-... or a header X-...):
  name          found in a source file as a whole word

A path component in capitals (`log/S`, `member-I/pid`, `DIR/LOCK`) is a placeholder: that path is
passed over. Flags are read from spans that are a flag or one of our programs' command lines
(`hf3fs-meta-server --data-dir DIR`), not from other programs' (`adduser --system`).

A name followed by the file it is in, `Router` (`mock_server/router.cpp`) or `kServerRoutes` in
`mock_server/metrics.hpp`, or a file followed by a name it holds, `src/durable/snapshot.hpp`:
`"HF3FSSNP"`, must be a word of that file (or of its .hpp/.cpp twin; of a file under a
directory), so that a name said to live in a file cannot move away from it unnoticed.

Plain lowercase words (`leader`, `always`) are passed over: they are English as often as code.
Source files are the repository's files (`git ls-files`, untracked ones included) but Markdown and
this checker's own files. Names that are not the repository's own are listed in ALLOWED, each with
why. Exit status 1 names each missing thing with the document's line.

  check_design_names.py --root REPO DOC.md...
  check_design_names.py --root REPO --expect-failures DOC.md   (passes only if exactly the names
      the document lists in a comment, <!-- expect: NAME,NAME... -->, are reported; the list stays
      out of source files, where the checker would find the names)
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys

# Names a document may quote that are no file or code of this repository.
ALLOWED = {
    # Other projects' names: etcd's raft package, a MIME type, Debian's command.
    'RawNode', 'text/plain', 'update-ca-certificates',
    # Where the package installs its systemd units (packaging/systemd/ holds them), and the build
    # directory a developer makes.
    'lib/systemd/system/hf3fs-meta-server.service', 'lib/systemd/system/hf3fs-meta-proxy.service',
    'build/release',
    # Patterns, not names: fuzz_NAME_replay's NAME, the metric names ending in these.
    'fuzz_NAME_replay', '_refused_total', '_hits_total',
}

SOURCE_EXTENSIONS = ('.cpp', '.hpp', '.py', '.md', '.sh', '.cmake', '.txt')
SELF = ('tests/docs/check_design_names.py', 'tests/docs/design_names_must_fail.md')

IDENT = r'[A-Za-z_][A-Za-z0-9_]*'
SYMBOL = re.compile(r'~?(%s(?:::%s)*)' % (IDENT, IDENT))
CALL = re.compile(r'^(%s(?:::%s)*)(?:<[^>]*>)?\(.*\)$' % (IDENT, IDENT), re.S)
FLAG = re.compile(r'(?<![\w-])(--[a-z0-9][a-z0-9-]*)(?![\w*-])')
HYPHENATED = re.compile(r'^(?:hf3fs|X)(?:-[A-Za-z0-9]+)+$')
PLACEHOLDER = re.compile(r'(?:^|[/-])[A-Z]+(?:$|/)')
# A name, then the file it lives in: `Name` (`path`...) or `Name` in `path`; or the file, then the
# name it holds: `path`: `Name`.
NAME_IN_FILE = re.compile(r'`([^`]+)`\s+(?:\(|in\s+)`([^`]+)`')
FILE_THEN_NAME = re.compile(r'`([^`]+)`:\s+`([^`]+)`')


def repository_files(root):
    try:
        out = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                             cwd=root, check=True, capture_output=True, text=True).stdout
        return sorted(set(out.split('\n')) - {''})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ('.git', 'build')]
            found += [os.path.relpath(os.path.join(top, f), root) for f in files]
        return sorted(found)


class Source:
    def __init__(self, root):
        self.paths = [p for p in repository_files(root) if os.path.isfile(os.path.join(root, p))]
        texts = []
        for path in self.paths:
            if path.endswith('.md') or path in SELF:
                continue
            with open(os.path.join(root, path), 'rb') as f:
                texts.append(f.read().decode('latin-1'))
        self.texts = dict(zip([p for p in self.paths if not p.endswith('.md') and p not in SELF],
                              texts))
        text = '\n'.join(texts)
        self.words = set(re.findall(IDENT, text))
        self.spellings = set(re.findall(r'[\w-]+', text))  # hf3fs-meta-proxy, --data-dir

    def has_path(self, token):
        if token.startswith('<') and token.endswith('>'):
            token = 'include/' + token[1:-1]
        token = token.rstrip('/')
        if '*' in token:
            return any(fnmatch.fnmatch(p, token) or fnmatch.fnmatch(p, '*/' + token)
                       for p in self.paths)
        for p in self.paths:
            if p == token or p.endswith('/' + token):
                return True
            if p.startswith(token + '/') or ('/' + token + '/') in p:
                return True
        return False

    def has_spelling(self, text):
        return text in self.spellings

    def files_at(self, token):
        """The source files a path span names: the file and its twin, or a directory's files."""
        if token.startswith('<') and token.endswith('>'):
            token = 'include/' + token[1:-1]
        token = token.rstrip('/')
        stem, ext = os.path.splitext(token)
        names = {token}
        if ext in ('.hpp', '.cpp'):
            names |= {stem + '.hpp', stem + '.cpp'}
        return [p for p in self.texts
                if any(p == n or p.endswith('/' + n) for n in names)
                or p.startswith(token + '/') or ('/' + token + '/') in p]

    def file_has_word(self, token, word):
        return any(re.search(r'\b%s\b' % re.escape(word), self.texts[p])
                   for p in self.files_at(token))


def inline_code(markdown):
    """(line, text) of every inline code span outside fenced blocks."""
    spans = []
    in_fence = False
    paragraph = []  # (line number, text) of the lines since the last fence
    lines = markdown.split('\n')
    for number, line in enumerate(lines + ['```'], 1):
        if line.lstrip().startswith('```'):
            if not in_fence:
                text = '\n'.join(t for _, t in paragraph)
                starts = [n for n, _ in paragraph]
                offsets = []
                at = 0
                for _, t in paragraph:
                    offsets.append(at)
                    at += len(t) + 1
                for m in re.finditer(r'(`+)(.+?)\1', text, re.S):
                    index = max(i for i, o in enumerate(offsets) if o <= m.start())
                    spans.append((starts[index], ' '.join(m.group(2).split())))
                paragraph = []
            in_fence = not in_fence
            continue
        if not in_fence:
            paragraph.append((number, line))
    return spans


def looks_like_path(token):
    if ' ' in token or '://' in token or token.startswith('/') or token.startswith('-'):
        return False
    if token.startswith('<') and token.endswith('>') and '/' in token:
        return True  # an include
    if '<' in token or '{' in token or '=' in token or ':' in token:
        return False  # a placeholder (members/<name>, /keys/{rank}), a setting, a URL
    if PLACEHOLDER.search(token):
        return False  # log/S, member-I/pid
    return '/' in token or token.endswith(SOURCE_EXTENSIONS)


def symbol_of(token):
    """The C++ name a span quotes, or None."""
    token = token.strip('"')
    call = CALL.match(token)
    if call:
        return call.group(1)
    token = re.sub(r'<[^<>]*>$', '', token)  # Result<T>, durable::Result<T>
    m = SYMBOL.fullmatch(token)
    if not m:
        return None
    name = m.group(1)
    if '::' in name or '_' in name.strip('_') or re.search(r'[A-Z]', name):
        return name
    return None  # a plain lowercase word


def missing_names(spans, source):
    """(line, name, why) for each span naming what the repository does not have."""
    missing = []
    for line, token in spans:
        if token in ALLOWED:
            continue
        if looks_like_path(token):
            if not source.has_path(token):
                missing.append((line, token, 'no such file or directory'))
            continue
        ours = token.startswith('--') or token.startswith('hf3fs-meta')
        flags = FLAG.findall(token) if ours else []
        for flag in flags:
            if flag not in ALLOWED and not source.has_spelling(flag):
                missing.append((line, flag, 'no such flag in the source'))
        if flags:
            continue
        name = symbol_of(token)
        if name:
            parts = [p for p in name.split('::') if p not in ALLOWED]
            if name not in ALLOWED and any(p not in source.words for p in parts):
                missing.append((line, name, 'no such name in the source'))
            continue
        if HYPHENATED.match(token) and not source.has_spelling(token):
            missing.append((line, token, 'no such name in the source'))
    return missing


def misplaced_names(markdown, source):
    """(line, name, path) for each `Name` (`path`) whose name that file does not hold."""
    out = []
    prose = re.sub(r'^```.*?^```', lambda m: '\n' * m.group(0).count('\n'), markdown,
                   flags=re.S | re.M)
    pairs = [(m.start(), m.group(1), m.group(2)) for m in NAME_IN_FILE.finditer(prose)]
    pairs += [(m.start(), m.group(2), m.group(1)) for m in FILE_THEN_NAME.finditer(prose)]
    for start, name, path in sorted(pairs):
        name, path = symbol_of(' '.join(name.split())), ' '.join(path.split())
        if not name or name in ALLOWED or not looks_like_path(path) or not source.has_path(path):
            continue
        word = name.split('::')[-1]
        if not source.file_has_word(path, word):
            out.append((prose.count('\n', 0, start) + 1, name, path))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--root', required=True, help='the repository')
    parser.add_argument('--expect-failures', action='store_true',
                        help="pass only if exactly the names of the document's expect comment are reported")
    parser.add_argument('docs', nargs='+')
    args = parser.parse_args()
    source = Source(args.root)
    reported = set()
    expected = set()
    checked = 0
    for doc in args.docs:
        with open(os.path.join(args.root, doc), encoding='utf-8') as f:
            markdown = f.read()
        for listed in re.findall(r'<!-- expect: (.*?) -->', markdown, re.S):
            expected |= set(filter(None, (n.strip() for n in listed.split(','))))
        spans = inline_code(markdown)
        checked += len(spans)
        for line, name, why in missing_names(spans, source):
            print('%s:%d: `%s`: %s' % (doc, line, name, why))
            reported.add(name)
        for line, name, path in misplaced_names(markdown, source):
            print('%s:%d: `%s`: not in `%s`' % (doc, line, name, path))
            reported.add(name)
    if args.expect_failures:
        if not expected:
            print('no <!-- expect: NAME,... --> comment in %s' % ', '.join(args.docs))
            return 1
        if reported != expected:
            print('expected exactly these to be missing: %s' % ', '.join(sorted(expected)))
            print('not reported: %s' % (', '.join(sorted(expected - reported)) or '-'))
            print('reported besides: %s' % (', '.join(sorted(reported - expected)) or '-'))
            return 1
        print('%d spans read, the %d expected names reported missing' % (checked, len(expected)))
        return 0
    if reported:
        print('%d names above are in the docs but not in the repository' % len(reported))
        return 1
    print('%d spans read, every file and name they quote exists' % checked)
    return 0


if __name__ == '__main__':
    sys.exit(main())
