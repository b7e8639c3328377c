// The CLI against a moat-controller (api/controller.yaml): `moat run --server URL -- CMD`,
// `moat sandbox create|ls|get|exec|cp|rm` and `moat node ls|cordon|uncordon|drain`. The server
// comes from --server or MOAT_SERVER, the API key from --api-key or MOAT_API_KEY.
#pragma once

#include <string>
#include <vector>

namespace moat::cli {

// True when `args` (after "run") ask for a controller: --server before the command.
bool WantsServer(const std::vector<std::string>& args);

// `moat run --server URL [--api-key KEY] [--json] [--memory SIZE] [--cpus X] [--wall-timeout DUR]
// [--env N=V] [--image URI] -- COMMAND...`, with the local contract: without --json the
// command's output on stdout and stderr and its exit status (128+N for signal N, 124 on a
// timeout); with --json the result object and 0; 125 if it could not run.
int RemoteRunMain(const std::vector<std::string>& args);

int SandboxCommandMain(const std::vector<std::string>& args);  // args after "sandbox"
int NodeCommandMain(const std::vector<std::string>& args);     // args after "node"

extern const char kSandboxUsage[];
extern const char kNodeUsage[];

}  // namespace moat::cli
