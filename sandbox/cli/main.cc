// Placeholder entry point; the real CLI lands with the runtime.
#include <cstdio>

int main() {
  std::fprintf(stderr, "moat: not built yet\n");
  return 125;
}
