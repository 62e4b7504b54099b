// The registry of code generation targets by device type.
#include "kiln/codegen/Target.h"

#include <map>
#include <mutex>

namespace kiln::codegen {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<DeviceType, std::shared_ptr<const Target>> targets{{DeviceType::CPU, cpuTarget()}};
};

Registry &registry() {
  static Registry r;
  return r;
}

} // namespace

std::shared_ptr<const Target> findTarget(DeviceType type) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.targets.find(type);
  return it == r.targets.end() ? nullptr : it->second;
}

void register_target(DeviceType type, std::shared_ptr<const Target> target) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.targets[type] = std::move(target);
}

} // namespace kiln::codegen
