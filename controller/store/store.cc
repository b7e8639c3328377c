#include "controller/store/store.h"

namespace moat::controller {

bool IsValidKey(absl::string_view key) {
  if (key.empty() || key.size() > 512) return false;
  for (char c : key) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace moat::controller
