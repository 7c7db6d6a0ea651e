#!/usr/bin/env python3
"""Every fenced code block of a Markdown file, compiled or run, so that the README cannot rot.

The info string of a block says what is done with it:

  cpp              compiled against the SDK with -Wall -Wextra -Wpedantic -Werror, then run
                   against a fresh server
  python           run against a fresh server (PYTHONPATH holds the built module)
  sh               run by bash -euo pipefail against a fresh server
  sh own-server    run by bash -euo pipefail; the block starts its own server
  sh server        each command line that starts hf3fs-meta-server starts a server, which must
                   print its "listening on" line and stop cleanly on SIGTERM; the other lines run
                   in order, in the same directory, before it
  console          "$ COMMAND" lines, each followed by the exact output it must print, against a
                   fresh server (all the commands in one shell)
  console FLAG...  the same against a fresh server started with these flags (`console
                   --dedup-max-bytes 300`); a flag the server refuses fails the block
  console continued
                   the same against the server of the console block before it, as that block left it
  LANG no-run      not run: installation commands, configuration for other programs
  text             not code (a usage summary)

Any other info string fails the test, so that a new block is never silently skipped.

In a console block's expected output:
  - `<WORD>` (lowercase letters, e.g. `<ms>`, `<seconds>`) stands for a number that varies from run
    to run (a time, a Retry-After); everything else must match exactly;
  - an HTTP answer printed by `curl -i` (its CR LF line ends read as LF) may leave out the headers the
    reference server puts on every answer, `content-length`, `X-Hf3fs-Keyed-Release: 1` and
    `x-request-id-dedup: <ms>` (docs/protocol.md's convention): when it shows none of the three they
    are taken out of the actual answer, else every header is compared;
  - leading `$ cat FILE` steps (FILE a plain name) write FILE with the output shown, before the server
    starts, so that a flag may name it (`console --auth-token-file token` after `$ cat token`).

Blocks name the server's default address, 127.0.0.1:18000 (and port 18000 alone); each block runs
in a directory of its own with that address replaced by a server on a free port, and with PATH
leading to the built hf3fs-meta-server and hf3fs-meta. Every process a block starts is stopped: a
block runs in a process group of its own, which is killed when it ends.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

BLOCK_TIMEOUT = 120  # seconds for one block (a C++ compile included)
DEFAULT_PORT = "18000"


class Failure(Exception):
    pass


def blocks(markdown):
    """(line number, info string, text) of every fenced block."""
    found = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2).strip(), i + 1
        i += 1
        body = []
        while i < len(lines) and lines[i] != fence:
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise Failure(f"line {start}: the block is never closed")
        found.append((start, info, "\n".join(body) + "\n"))
        i += 1
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_port(text, port):
    return text.replace(DEFAULT_PORT, str(port))


class Server:
    """hf3fs-meta-server started by this test on its own port, stopped by its PID."""

    def __init__(self, binary, args, cwd, port=None):
        self.port = port or free_port()
        self.log = os.path.join(cwd, f"server-{self.port}.log")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(self.port), *args],
                                            stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                            start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "listening on " in self.output():
                return
            if self.process.poll() is not None:
                raise Failure(f"the server exited with {self.process.returncode}:\n{self.output()}")
            time.sleep(0.02)
        self.stop()
        raise Failure(f"the server did not listen within 30 s:\n{self.output()}")

    def output(self):
        with open(self.log, encoding="utf-8", errors="replace") as log:
            return log.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise Failure("the server did not stop within 30 s of SIGTERM")
        if self.process.returncode != 0:
            raise Failure(f"the server exited with {self.process.returncode}:\n{self.output()}")


def run_group(argv, cwd, env, stdin=None):
    """Runs argv in a process group of its own, kills what is left of the group once it has ended (a
    server the block left running), and returns (status, stdout, stderr). Output goes to files, so
    that a process left behind holding them cannot keep the test waiting."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin is not None else None,
                                   stdout=out, stderr=err, start_new_session=True)
        try:
            if stdin is not None:
                process.stdin.write(stdin)
                process.stdin.close()
            process.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure(f"{argv[0]} did not finish within {BLOCK_TIMEOUT} s")
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        out.seek(0)
        err.seek(0)
        return process.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def check(result, what):
    code, out, err = result
    if code != 0:
        raise Failure(f"{what} exited with {code}\nstdout:\n{out}\nstderr:\n{err}")
    return out


class Runner:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.kept = None  # (server, directory, environment) of the last console block
        self.env = dict(os.environ)
        self.env["PATH"] = os.pathsep.join([os.path.dirname(args.server), os.path.dirname(args.cli),
                                            self.env.get("PATH", "")])
        self.env["PYTHONPATH"] = args.pythonpath
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        for name in ("HF3FS_META_TOKEN", "HF3FS_META_CA_FILE"):
            self.env.pop(name, None)

    def directory(self, line):
        path = os.path.join(self.work, f"block-{line}")
        os.mkdir(path)
        return path

    def with_server(self, line, run):
        cwd = self.directory(line)
        server = Server(self.args.server, [], cwd)
        env = dict(self.env, HF3FS_META_URL=f"http://127.0.0.1:{server.port}")
        try:
            run(cwd, env, server.port)
        finally:
            server.stop()

    def cpp(self, line, text):
        def run(cwd, env, port):
            source = os.path.join(cwd, "block.cpp")
            with open(source, "w") as f:
                f.write(with_port(text, port))
            binary = os.path.join(cwd, "block")
            # The compiler's own directories stay its own (an -I/usr/include breaks <cstdlib>'s #include_next).
            flags = [f for f in self.args.cxx_flag if f not in ("-I/usr/include", "-I/usr/local/include")]
            check(run_group([self.args.cxx, "-std=c++20", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                             *flags, source, "-o", binary, *self.args.link], cwd, env),
                  "the compiler")
            check(run_group([binary], cwd, env), "the program")
        self.with_server(line, run)

    def python(self, line, text):
        self.with_server(line, lambda cwd, env, port: check(
            run_group([self.args.python, "-"], cwd, env, with_port(text, port).encode()), "python"))

    def sh(self, line, text):
        self.with_server(line, lambda cwd, env, port: check(
            run_group(["bash", "-euo", "pipefail", "-s"], cwd, env, with_port(text, port).encode()), "bash"))

    def sh_own_server(self, line, text):
        cwd = self.directory(line)
        port = free_port()
        check(run_group(["bash", "-euo", "pipefail", "-s"], cwd, self.env, with_port(text, port).encode()), "bash")

    def sh_server(self, line, text):
        cwd = self.directory(line)
        commands = re.sub(r"\\\n\s*", "", text).splitlines()
        started = 0
        for command in commands:
            command = command.split(" #")[0].strip()
            if not command or command.startswith("#"):
                continue
            if command.startswith("hf3fs-meta-server"):
                argv = command.split()[1:]
                port = free_port()
                if "--port" in argv:
                    at = argv.index("--port")
                    del argv[at:at + 2]
                if "--host" in argv:
                    at = argv.index("--host")
                    del argv[at:at + 2]
                Server(self.args.server, argv, cwd, port).stop()
                started += 1
            else:
                check(run_group(["bash", "-euo", "pipefail", "-c", command], cwd, self.env), command)
        if started == 0:
            raise Failure("a `sh server` block starts no hf3fs-meta-server")

    def console(self, line, text, flags):
        steps = []  # (command, expected output lines)
        for row in text.splitlines():
            if row.startswith("$ "):
                steps.append((row[2:], []))
            elif steps:
                steps[-1][1].append(row)
            else:
                raise Failure(f"console block: output before any command: {row!r}")

        if flags == ["continued"]:
            if self.kept is None:
                raise Failure("`console continued`: no console block before it left a server")
            server, cwd, env = self.kept
        else:
            self.stop_kept()
            cwd = self.directory(line)
            for cmd, expected in steps:
                m = re.fullmatch(r"cat ([\w.-]+)", cmd)
                if not m:
                    break
                with open(os.path.join(cwd, m.group(1)), "w") as f:
                    f.write("".join(row + "\n" for row in expected))
            server = Server(self.args.server, flags, cwd)
            env = dict(self.env, HF3FS_META_URL=f"http://127.0.0.1:{server.port}")
            self.kept = (server, cwd, env)
        port = server.port
        marker = "--- readme_test step ---"
        script = "".join(f"echo '{marker}'\n{with_port(cmd, port)}\n" for cmd, _ in steps)
        out = check(run_group(["bash", "-euo", "pipefail", "-s"], cwd, env, script.encode()), "bash")
        outputs = out.split(marker + "\n")[1:]
        for (cmd, expected), got in zip(steps, outputs):
            want = with_port("\n".join(expected), port).rstrip("\n")
            got = got.replace("\r\n", "\n").rstrip("\n")
            if not matches(want, got):
                raise Failure(f"$ {cmd}\nexpected:\n{want}\ngot:\n{got}")

    def stop_kept(self):
        if self.kept is not None:
            server, self.kept = self.kept[0], None
            server.stop()


# Headers the reference server puts on every answer, which docs/protocol.md leaves out after its
# first examples (the value of the dedup window depends on the server's flags).
COMMON_HEADERS = re.compile(r"(?im)^(content-length: \d+|X-Hf3fs-Keyed-Release: 1|x-request-id-dedup: \d+)\n")
PLACEHOLDER = re.compile(r"<[a-z]+>")


def matches(want, got):
    """Whether an actual output is the expected one: exactly, but for placeholders and, in an HTTP
    answer that shows none of them, the headers every answer carries."""
    if got.startswith("HTTP/") and not COMMON_HEADERS.search(want.split("\n\n")[0] + "\n"):
        head, sep, body = got.partition("\n\n")
        got = COMMON_HEADERS.sub("", head + "\n").rstrip("\n") + sep + body
    pattern = "".join(r"\d+" if PLACEHOLDER.fullmatch(part) else re.escape(part)
                      for part in re.split(r"(<[a-z]+>)", want))
    return re.fullmatch(pattern, got) is not None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("markdown")
    parser.add_argument("--server", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", required=True)
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--cxx-flag", action="append", default=[], help="a compile flag (-I...), repeatable")
    parser.add_argument("--link", action="append", default=[], help="a link argument, repeatable")
    parser.add_argument("--only-line", type=int,
                        help="run only the block opened on this line (and the console blocks it continues)")
    parser.add_argument("--expect-failures", action="store_true",
                        help="the test of this test: every block must fail (tests/docs/must_fail.md)")
    args = parser.parse_args()
    for name in ("server", "cli", "pythonpath"):  # blocks run in directories of their own
        setattr(args, name, os.path.abspath(getattr(args, name)))

    with open(args.markdown, encoding="utf-8") as f:
        found = blocks(f.read())
    if not found:
        print(f"{args.markdown}: no code block", file=sys.stderr)
        return 1
    wanted = {args.only_line}
    lines = [line for line, _, _ in found]
    if args.only_line in lines:  # a `console continued` block needs the blocks it continues
        at = lines.index(args.only_line)
        while found[at][1] == "console continued" and at > 0:
            at -= 1
            while at > 0 and found[at][1].split(" ")[0] != "console":
                at -= 1
            wanted.add(lines[at])
    failures, ran, skipped = 0, 0, []
    with tempfile.TemporaryDirectory(prefix="readme_test.") as work:
        runner = Runner(args, work)
        kinds = {"cpp": runner.cpp, "python": runner.python, "sh": runner.sh, "sh own-server": runner.sh_own_server,
                 "sh server": runner.sh_server}
        for line, info, text in found:
            if args.only_line and line not in wanted:
                continue
            if info == "text" or info.endswith(" no-run"):
                skipped.append(f"{line} ({info})")
                continue
            what = kinds.get(info)
            if info.split(" ")[0] == "console":
                what = lambda line, text, flags=info.split()[1:]: runner.console(line, text, flags)
            started = time.monotonic()
            try:
                if what is None:
                    raise Failure(f"unknown info string {info!r} (see {os.path.basename(__file__)}'s docstring)")
                what(line, text)
                ran += 1
                print(f"ok   {args.markdown}:{line} ({info}, {time.monotonic() - started:.1f} s)")
            except (Failure, OSError) as e:
                failures += 1
                print(f"FAIL {args.markdown}:{line} ({info})\n{e}", file=sys.stderr)
        try:
            runner.stop_kept()
        except Failure as e:
            failures += 1
            print(f"FAIL {args.markdown}: the last console block's server\n{e}", file=sys.stderr)
    print(f"{ran} blocks passed, {failures} failed; not run: {', '.join(skipped) or 'none'}")
    if args.expect_failures:
        return 0 if failures > 0 and ran == 0 else 1
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
