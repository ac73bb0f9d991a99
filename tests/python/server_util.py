"""Starts real `tensorfold serve` processes for tests and benches, and small HTTP helpers.

Used by tests/python/test_server_*.py (through the fixtures below) and by bench/*.py (through
`server()`), so it imports pytest lazily.
"""
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = os.environ.get("TF_BIN", str(REPO / "build" / "tensorfold"))
READY_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 10.0


class ServerError(RuntimeError):
    pass


def free_port():
    """A port that was free a moment ago; the caller retries if the server then fails to bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One running server process: its base URL, its process and its captured stderr."""

    def __init__(self, proc, port, log_path, args):
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.args = args

    def log(self):
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def post(self, path, body, **kw):
        kw.setdefault("timeout", 60)
        return requests.post(self.url + path, json=body, **kw)

    def get(self, path, **kw):
        kw.setdefault("timeout", 30)
        return requests.get(self.url + path, **kw)

    def memory(self):
        return self.get("/memory").json()

    def metric(self, name):
        """Value of an unlabelled Prometheus sample from /metrics, or None."""
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def wait_idle(self, timeout=5.0):
        """Polls /memory until no KV page is used and no lane is busy; returns the last snapshot."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.memory()
            if m["kv_pool"]["pages_used"] == 0 and m["lanes"]["busy"] == 0:
                return m
            if time.monotonic() > deadline:
                raise ServerError(f"server not idle after {timeout} s: {json.dumps(m)}")
            time.sleep(0.05)

    def stop(self, check=True):
        """SIGTERM, then wait; with check, the exit must be clean and prompt."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                if check:
                    raise ServerError(f"server did not exit within {EXIT_TIMEOUT_S} s of SIGTERM\n{self.log()}")
                return
        if check and self.proc.returncode != 0:
            raise ServerError(f"server exited with code {self.proc.returncode}\n--- stderr ---\n{self.log()}")


def _start(bin_path, args, env):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tf-serve-", suffix=".log", delete=False)
    cmd = [bin_path, "serve", "--port", str(port)] + [str(a) for a in args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
    log.close()
    srv = Server(proc, port, log.name, cmd)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return srv, False
        try:
            if requests.get(srv.url + "/health", timeout=2).status_code == 200:
                return srv, True
        except requests.RequestException:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise ServerError(f"server not ready within {READY_TIMEOUT_S} s: {' '.join(cmd)}\n{srv.log()}")


@contextlib.contextmanager
def server(args=(), bin_path=None, check_exit=True, attempts=3):
    """Runs `tensorfold serve ARGS` on a free port; yields a Server; SIGTERMs it at the end.

    A server that dies before /health answers (another process took the port) is retried.
    """
    bin_path = bin_path or DEFAULT_BIN
    env = dict(os.environ)
    srv = None
    for _ in range(attempts):
        srv, ok = _start(bin_path, list(args), env)
        if ok:
            break
        out = srv.log()
        if "bind" not in out.lower() and "address" not in out.lower():
            raise ServerError(f"server exited with code {srv.proc.returncode} before ready: {' '.join(srv.args)}\n{out}")
    else:
        raise ServerError(f"server could not bind a port in {attempts} attempts\n{srv.log()}")
    failed = False
    try:
        yield srv
    except BaseException:
        failed = True
        raise
    finally:
        try:
            srv.stop(check=check_exit and not failed)
        finally:
            if failed:
                print(f"--- tensorfold stderr ({' '.join(srv.args)}) ---\n{srv.log()}")
            with contextlib.suppress(OSError):
                os.unlink(srv.log_path)


def sse_events(resp):
    """Decoded `data:` payloads of a requests streaming response, up to and without [DONE]."""
    out = []
    for line in resp.iter_lines():
        if not line or not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        out.append(json.loads(data))
    return out


def raw_http(port, data, timeout=10.0):
    """Sends raw bytes on a fresh connection and returns (status, headers_text, body_bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            chunks.append(b)
            if _complete(b"".join(chunks)):
                break
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return status, head.decode(errors="replace"), body


def _complete(raw):
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return len(body) >= int(v.strip())
    return False


# --- pytest fixtures (imported into test modules: `from server_util import default_server`) ---

try:
    import pytest as _pt

    @_pt.fixture(scope="module")
    def default_server(tensorfold_bin):
        """The built-in default model, 4 lanes, 2 threads; shared by one test module."""
        with server(["--parallel", 4, "--threads", 2], bin_path=tensorfold_bin) as srv:
            yield srv

    @_pt.fixture(scope="module")
    def start_server(tensorfold_bin):
        """A factory: `with start_server("--parallel", 1, ...) as srv:` for servers with custom flags."""
        def factory(*args, check_exit=True):
            return server(list(args), bin_path=tensorfold_bin, check_exit=check_exit)
        return factory

    def cache_fixtures(base):
        """Module-scoped servers on the flags base: `cold, warm = cache_fixtures(BASE)` gives one
        with the prompt cache off and one with it on, for resumed = cold checks."""
        @_pt.fixture(scope="module")
        def cold(tensorfold_bin):
            with server(list(base) + ["--prompt-cache-gib", 0], bin_path=tensorfold_bin) as srv:
                yield srv

        @_pt.fixture(scope="module")
        def warm(tensorfold_bin):
            with server(list(base), bin_path=tensorfold_bin) as srv:
                yield srv

        return cold, warm
except ImportError:  # benches run without pytest
    pass
