"""`lingbot-map serve` as a child process on a free loopback port, for tests and the load test."""

import os
import re
import subprocess
import threading
import time
import urllib.request

URL = re.compile(r"(https?://[0-9A-Za-z.\-\[\]]+:\d+)")


class Unavailable(Exception):
    """This build has no `serve` (it needs Boost, as the viewer does)."""


def has_serve(cli):
    """Whether `cli` exists and knows the serve command."""
    if not cli or not os.path.exists(cli):
        return False
    try:
        out = subprocess.run([cli, "serve", "--help"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    # Without the command, the program's own help comes back (also with exit code 0).
    return out.returncode == 0 and re.search(r"Usage: \S+ serve\b", out.stdout) is not None


class ServeProcess:
    """Starts `cli serve --port 0 ARGS...`, waits until it answers /healthz; stop() ends it.

    The URL is read from what the server prints when it listens (http://HOST:PORT)."""

    def __init__(self, cli, *args, env=None, timeout=120):
        if not has_serve(cli):
            raise Unavailable(f"{cli}: no serve command in this build")
        self.output = []  # the server's lines (stdout and stderr), for failure messages
        self._seen = threading.Condition()
        self.proc = subprocess.Popen([cli, "serve", "--port", "0", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env={**os.environ, **(env or {})})
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            self.url = self._wait_for_url(timeout)
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def _pump(self):
        for line in self.proc.stdout:
            with self._seen:
                self.output.append(line.rstrip("\n"))
                self._seen.notify_all()
        with self._seen:
            self._seen.notify_all()

    def _wait_for_url(self, timeout):
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                for line in self.output:
                    m = URL.search(line)
                    if m:
                        return m.group(1)
                if self.proc.poll() is not None:
                    raise RuntimeError("the server exited: " + " | ".join(self.output[-10:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the server printed no URL within {timeout} s: " +
                                       " | ".join(self.output[-10:]))
                self._seen.wait(min(left, 0.5))

    def _wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the server does not answer /healthz: " +
                                   " | ".join(self.output[-10:]))
            time.sleep(0.1)

    def stop(self):
        """SIGTERM, then SIGKILL after 15 s; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
