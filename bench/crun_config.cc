#include "bench/crun_config.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moat::bench {

absl::Status WriteCrunConfig(const std::string& template_path, const std::vector<std::string>& argv,
                             const std::string& out_path) {
  std::ifstream in(template_path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the crun bundle's config \"",
                                            template_path, "\"; bench/run.sh writes it"));
  }
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", template_path, "\" is not valid JSON: ", e.what()));
  }
  if (!config.is_object() || !config.contains("process") || !config["process"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", template_path, "\" has no \"process\" object; is it an OCI config?"));
  }
  config["process"]["args"] = argv;
  config["process"]["terminal"] = false;
  std::ofstream out(out_path, std::ios::trunc);
  out << config.dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write \"", out_path, "\""));
  return absl::OkStatus();
}

}  // namespace moat::bench
