// The Python of the code contexts (code_interpreter.h) and the parsing of their frames.
#include "node-agent/api/code_interpreter.h"

#include <string>
#include <utility>

#include "sandbox/output/sanitizer.h"

namespace moat::agent {

// Python 3.8 or later (the Debian 12 root has 3.11). Runs in the sandbox with the sandbox's
// rights; what it does with the socket concerns the sandbox alone.
const char kCodeServerScript[] =
    R"PY(import ast, builtins, codecs, fcntl, io, json, os, select, signal, socket, struct, sys, termios, threading, time, traceback
_path = os.environ.pop("MOAT_CODE_SOCKET")
os.environ.pop("MOAT_CODE_SERVER", None)
_cwd = os.environ.pop("MOAT_CODE_CWD", "")
if _cwd:
    os.chdir(_cwd)
sys.argv = [""]
signal.signal(signal.SIGINT, signal.default_int_handler)
_CHUNK = 4096
_MAX_RESULT = 8192
_send_lock = threading.Lock()
_fwd_lock = threading.Lock()
_conn = None
_running = False
_main = threading.main_thread().ident


def _send(msg):
    data = (json.dumps(msg) + "\n").encode()
    with _send_lock:
        if _conn is not None:
            try:
                _conn.sendall(data)
            except OSError:
                pass


def _text(name, text):
    for i in range(0, len(text), _CHUNK):
        _send({"type": name, "text": text[i:i + _CHUNK]})


class _Out(io.TextIOBase):
    # sys.stdout and sys.stderr of the code: a piece goes out at each line end or when flushed.
    def __init__(self, name, fd):
        self._name, self._fd, self._buf = name, fd, ""

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not " + type(s).__name__)
        self._buf += s
        if "\n" in s or len(self._buf) >= _CHUNK:
            self.flush()
        return len(s)

    def flush(self):
        buf, self._buf = self._buf, ""
        if buf:
            # What the code or its processes wrote to descriptors 1 and 2 before goes out first.
            with _fwd_lock:
                _forward_pending()
                _text(self._name, buf)

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    @property
    def encoding(self):
        return "utf-8"


# What processes the code starts write to descriptors 1 and 2: forwarded as well.
_pipes = []


_decoders = {}


def _forward(fd, name):
    while True:
        select.select([fd], [], [])
        with _fwd_lock:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                return
            _text(name, _decoders[fd].decode(data))


def _forward_pending():
    # Under _fwd_lock: what the pipes hold now, sent before the interpreter's own text (its
    # forwarder thread may not have woken yet: a child's line before the print that follows it).
    for fd, name in zip(_pipes, ("stdout", "stderr")):
        while _pending(fd) > 0:
            _text(name, _decoders[fd].decode(os.read(fd, 65536)))


def _pending(fd):
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _drain():
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        with _fwd_lock:
            if all(_pending(fd) == 0 for fd in _pipes):
                return
        time.sleep(0.002)


_srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    os.unlink(_path)
except FileNotFoundError:
    pass
_srv.bind(_path)
os.chmod(_path, 0o600)
_srv.listen(8)
os.write(1, b"moat-code-ready\n")
for _fd, _name in ((1, "stdout"), (2, "stderr")):
    _r, _w = os.pipe()
    os.set_blocking(_r, False)
    os.dup2(_w, _fd)
    os.close(_w)
    _pipes.append(_r)
    _decoders[_r] = codecs.getincrementaldecoder("utf-8")("replace")
    threading.Thread(target=_forward, args=(_r, _name), daemon=True).start()
sys.stdout, sys.stderr = _Out("stdout", 1), _Out("stderr", 2)
sys.stdin = open(os.devnull)

_ns = {"__name__": "__main__", "__builtins__": builtins}
_count = 0


def _bundle(value):
    out = {"text": repr(value)[:_MAX_RESULT]}
    for method, mime in (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown")):
        f = getattr(value, method, None)
        if callable(f):
            try:
                v = f()
                if isinstance(v, str):
                    out[mime] = v[:_MAX_RESULT]
            except Exception:
                pass
    return out


def _error(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    lines = "".join(traceback.format_exception(type(e), e, tb)).splitlines()
    if len(lines) > 100:
        lines = lines[:50] + ["... %d lines omitted ..." % (len(lines) - 100)] + lines[-50:]
    return {"ename": type(e).__name__, "evalue": str(e)[:_CHUNK],
            "traceback": [line[:1000] for line in lines]}


def _flush():
    sys.stdout.flush()
    sys.stderr.flush()
    _drain()


def _run(code):
    global _count
    _count += 1
    _send({"type": "execution_count", "execution_count": _count})
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), _ns)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), _ns)
            if value is not None:
                _ns["_"] = value
                _flush()
                _send({"type": "result", "results": _bundle(value)})
    except BaseException as e:
        _flush()
        _send({"type": "error", "error": _error(e)})
    finally:
        _flush()


def _watch(conn):
    # Further lines of the run's connection: an interrupt, or its end (the client was killed).
    f = conn.makefile("rb")
    for line in f:
        if _running:
            signal.pthread_kill(_main, signal.SIGINT)
    if _running:
        signal.pthread_kill(_main, signal.SIGINT)


while True:
    try:
        conn, _ = _srv.accept()
        with conn:
            request = json.loads(conn.makefile("rb").readline() or b"{}")
            with _send_lock:
                _conn = conn
            _running = True
            threading.Thread(target=_watch, args=(conn,), daemon=True).start()
            started = time.monotonic()
            _run(str(request.get("code", "")))
            _running = False
            _send({"type": "done", "execution_time": int((time.monotonic() - started) * 1000)})
            with _send_lock:
                _conn = None
    except KeyboardInterrupt:
        _running = False
        with _send_lock:
            _conn = None
    except Exception:
        _running = False
        with _send_lock:
            _conn = None
)PY";

// Started as `python3 -I -S`: nothing of the sandbox's environment or site packages changes it.
const char kCodeClientScript[] = R"PY(import json, os, signal, socket, sys
out = sys.stdout.buffer
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(os.environ["MOAT_CODE_SOCKET"])
except OSError as e:
    out.write((json.dumps({"type": "lost", "text": str(e)}) + "\n").encode())
    sys.exit(3)


def _interrupt(*_):
    try:
        s.sendall(b'{"interrupt": true}\n')
    except OSError:
        pass


signal.signal(signal.SIGINT, _interrupt)
s.sendall((json.dumps({"code": os.environ.get("MOAT_CODE", "")}) + "\n").encode())
for line in s.makefile("rb"):
    out.write(line)
    out.flush()
    if line.startswith(b'{"type": "done"'):
        sys.exit(0)
sys.exit(4)
)PY";

namespace {

using nlohmann::json;

// Cleaned as command output is (sandbox/output/sanitizer.h), but never replaced by the binary
// placeholder: a frame's text is one piece of a stream.
std::string Clean(const std::string& text) {
  sandbox::SanitizeOptions options;
  options.min_printable_ratio = 0;
  return sandbox::SanitizeOutput(text, false, options).text;
}

// Every string in `value` (objects and arrays, recursively) cleaned; other values as they are.
json CleanAll(const json& value) {
  if (value.is_string()) return Clean(value.get<std::string>());
  if (value.is_array() || value.is_object()) {
    json out = value;
    for (auto& item : out) item = CleanAll(item);
    return out;
  }
  return value;
}

}  // namespace

CodeFrame ParseCodeFrame(absl::string_view line) {
  CodeFrame frame;
  frame.text = std::string(line);
  json doc = json::parse(line.begin(), line.end(), nullptr, false);
  if (!doc.is_object() || !doc.contains("type") || !doc["type"].is_string()) return frame;
  const std::string type = doc["type"].get<std::string>();
  auto text_of = [&](const char* key) {
    return doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : "";
  };
  if (type == "stdout" || type == "stderr") {
    frame.kind = CodeFrame::Kind::kEvent;
    std::string text = Clean(text_of("text"));
    if (!text.empty()) frame.event = {{"type", type}, {"text", std::move(text)}};
  } else if (type == "execution_count" && doc.contains("execution_count") &&
             doc["execution_count"].is_number_integer()) {
    frame.kind = CodeFrame::Kind::kEvent;
    frame.event = {{"type", type}, {"execution_count", doc["execution_count"]}};
  } else if (type == "result" && doc.contains("results") && doc["results"].is_object()) {
    frame.kind = CodeFrame::Kind::kEvent;
    frame.event = {{"type", type}, {"results", CleanAll(doc["results"])}};
  } else if (type == "error" && doc.contains("error") && doc["error"].is_object()) {
    const json& error = doc["error"];
    json out = {{"ename", ""}, {"evalue", ""}, {"traceback", json::array()}};
    for (const char* key : {"ename", "evalue"}) {
      if (error.contains(key) && error[key].is_string()) out[key] = Clean(error[key]);
    }
    if (error.contains("traceback") && error["traceback"].is_array()) {
      for (const json& l : error["traceback"]) {
        if (l.is_string()) out["traceback"].push_back(Clean(l.get<std::string>()));
      }
    }
    frame.kind = CodeFrame::Kind::kEvent;
    frame.event = {{"type", "error"}, {"error", std::move(out)}};
  } else if (type == "done") {
    frame.kind = CodeFrame::Kind::kDone;
    if (doc.contains("execution_time") && doc["execution_time"].is_number_integer()) {
      frame.execution_time = doc["execution_time"].get<int64_t>();
    }
  } else if (type == "lost") {
    frame.kind = CodeFrame::Kind::kLost;
    frame.text = Clean(text_of("text"));
  }
  return frame;
}

}  // namespace moat::agent
