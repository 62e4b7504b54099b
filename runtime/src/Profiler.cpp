// Chrome-trace profiler (see Profiler.h).
#include "kiln/runtime/Profiler.h"

#include <cstdio>
#include <cstdlib>

namespace kiln::runtime {
namespace {

/// JSON string escaping for event names.
std::string escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

void write_at_exit() {
  const char *path = std::getenv("KILN_PROFILE");
  std::string error;
  if (path && *path && !Profiler::instance().stop_and_write(path, &error))
    std::fprintf(stderr, "[kiln] KILN_PROFILE: %s\n", error.c_str());
}

}  // namespace

Profiler::Profiler() : origin_(std::chrono::steady_clock::now()) {
  const char *path = std::getenv("KILN_PROFILE");
  if (path && *path) {
    enabled_ = true;
    std::atexit(write_at_exit);
  }
}

Profiler &Profiler::instance() {
  static Profiler *profiler = new Profiler();  // never destroyed: used from atexit
  return *profiler;
}

void Profiler::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
  enabled_ = true;
}

double Profiler::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

void Profiler::record(std::string name, std::string category, double start_us, double duration_us) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(Event{std::move(name), std::move(category), start_us, duration_us});
}

std::vector<Profiler::Event> Profiler::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

bool Profiler::stop_and_write(const std::string &path, std::string *error) {
  enabled_ = false;
  std::vector<Event> events = this->events();
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    if (error) *error = "cannot write the trace to '" + path + "'";
    return false;
  }
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  for (size_t i = 0; i < events.size(); ++i) {
    const Event &e = events[i];
    std::fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":0,\"tid\":%d}",
                 i ? "," : "", escape(e.name).c_str(), escape(e.category).c_str(), e.start_us, e.duration_us,
                 e.category == "step" ? 0 : 1);
  }
  std::fprintf(f, "\n]}\n");
  const bool ok = std::fclose(f) == 0;
  if (!ok && error) *error = "error while writing '" + path + "'";
  return ok;
}

}  // namespace kiln::runtime
