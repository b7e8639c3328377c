// Code contexts of the per-sandbox API (execd's /code): a small Python REPL protocol of our own,
// run inside the sandbox like any command (never on the host).
//
// One context is one long-lived interpreter, the *server* (kCodeServerScript), started in the
// sandbox as a command of its own. It listens on a Unix socket in the sandbox's /tmp and runs
// one piece of code at a time in one namespace, so variables, imports and functions persist.
// Each run is a short command, the *client* (kCodeClientScript), that sends the code over the
// socket and prints what the server answers: one JSON frame per line (below), which the agent
// reads as the client's stdout, cleaned like any output, and turns into execd's SSE events
// (ParseCodeFrame). An interrupt of the run's client (SIGINT) is passed on to the server, which
// raises KeyboardInterrupt in the code; a client killed outright does the same by closing the
// socket.
//
// Frames (server -> client -> agent), one JSON object per line:
//   {"type": "execution_count", "execution_count": N}      the run's number in the context
//   {"type": "stdout" | "stderr", "text": "..."}            output, at most 4096 characters each
//   {"type": "result", "results": {"text": repr, "text/html": ...}}  the last expression's value
//   {"type": "error", "error": {"ename", "evalue", "traceback": [lines]}}
//   {"type": "done", "execution_time": ms}                  the run ended (after an error too)
//   {"type": "lost", "text": why}                           the client found no server
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moat::agent {

// The server; its environment: MOAT_CODE_SOCKET (the socket's path in the sandbox), MOAT_CODE_CWD
// (optional working directory). It prints kCodeServerReady on its stdout once it listens.
extern const char kCodeServerScript[];
inline constexpr absl::string_view kCodeServerReady = "moat-code-ready\n";
// The client; its environment: MOAT_CODE_SOCKET and MOAT_CODE (the code to run).
extern const char kCodeClientScript[];

// What one line of a client's stdout means.
struct CodeFrame {
  enum class Kind {
    kEvent,    // `event` is the SSE event to send (without its timestamp)
    kDone,     // the run ended; `execution_time` in milliseconds
    kLost,     // the client found no server; `text` says why
    kInvalid,  // not a frame (cut, or not JSON): sent as stdout text as it is
  };
  Kind kind = Kind::kInvalid;
  nlohmann::json event;
  int64_t execution_time = 0;
  std::string text;
};

// `line` without its "\n". Texts inside frames are cleaned again after JSON decoding (escape
// sequences removed, secrets masked), as output is: the JSON escapes hid them from the first
// cleaning. A line that is no frame we know is kInvalid; output that is empty once cleaned is a
// kEvent with a null `event` (nothing to send).
CodeFrame ParseCodeFrame(absl::string_view line);

}  // namespace moat::agent
