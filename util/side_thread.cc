#include "util/side_thread.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace moat {

int RunnableTasks(const char* loadavg_path) {
  const int fd = ::open(loadavg_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  // "0.52 0.58 0.59 2/1024 12345": the fourth field, before its slash.
  const char* field = buf;
  for (int i = 0; i < 3 && field != nullptr; ++i) {
    field = std::strchr(field, ' ');
    if (field != nullptr) ++field;
  }
  if (field == nullptr || std::strchr(field, '/') == nullptr) return -1;
  char* end = nullptr;
  const long runnable = std::strtol(field, &end, 10);
  return end != field && *end == '/' && runnable >= 0 ? static_cast<int>(runnable) : -1;
}

SideThread::SideThread(std::function<void()> body, Placement placement) : body_(std::move(body)) {
  pthread_attr_t attr;
  bool have_attr = pthread_attr_init(&attr) == 0;
  const int here = placement == Placement::kAnywhere ? -1 : ::sched_getcpu();
  const bool can_pin = have_attr && here >= 0 && here < CPU_SETSIZE &&
                       ::sched_getaffinity(0, sizeof(all_cpus_), &all_cpus_) == 0 &&
                       CPU_COUNT(&all_cpus_) > 1 && CPU_ISSET(here, &all_cpus_);
  bool pin = can_pin && placement == Placement::kAwayFromCreator;
  if (can_pin && placement == Placement::kAuto) {
    // Another CPU is likely idle if fewer tasks are runnable than we have CPUs (we are one).
    const int runnable = RunnableTasks();
    pin = runnable >= 0 && runnable < CPU_COUNT(&all_cpus_);
  }
  if (pin) {
    cpu_set_t elsewhere = all_cpus_;
    CPU_CLR(here, &elsewhere);
    if (pthread_attr_setaffinity_np(&attr, sizeof(elsewhere), &elsewhere) == 0) {
      restore_affinity_ = true;
      avoided_cpu_ = here;
    }
  }
  joinable_ = pthread_create(&thread_, have_attr ? &attr : nullptr, &SideThread::Start, this) == 0;
  if (!joinable_ && restore_affinity_) {
    // The affinity may be what failed (a CPU set changed under us): try a plain thread.
    restore_affinity_ = false;
    avoided_cpu_ = -1;
    joinable_ = pthread_create(&thread_, nullptr, &SideThread::Start, this) == 0;
  }
  if (have_attr) pthread_attr_destroy(&attr);
  started_ = joinable_;
}

SideThread::~SideThread() { Join(); }

void SideThread::Join() {
  if (!joinable_) return;
  pthread_join(thread_, nullptr);
  joinable_ = false;
}

void* SideThread::Start(void* self) {
  auto* t = static_cast<SideThread*>(self);
  t->started_on_ = ::sched_getcpu();
  if (t->restore_affinity_) ::sched_setaffinity(0, sizeof(t->all_cpus_), &t->all_cpus_);
  t->body_();
  return nullptr;
}

}  // namespace moat
