// registry.hpp - the list of modules the program checks (not installed).
#ifndef SAMPLE_APP_REGISTRY_HPP
#define SAMPLE_APP_REGISTRY_HPP

#include <cstdint>
#include <string>
#include <vector>

namespace sample::app {

// One module's self-test.
struct Module {
    std::string name;                 // "core/vec", "cxx/json", ...
    std::uint32_t (*run)();           // records its checks, returns a digest of its results
};

// Every module, C first, in a fixed order.
const std::vector<Module>& modules();

}  // namespace sample::app

#endif  // SAMPLE_APP_REGISTRY_HPP
