// main.cpp - runs every module's self-test and prints a fixed report.
//
// The report goes to stdout and depends only on the code and the version
// the build stamped in; failed checks are explained on stderr. The last
// line is "sample: ok" (exit 0) or "sample: FAILED ..." (exit 1).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "registry.hpp"
#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/version.h"

namespace {

struct Outcome {
    unsigned checks = 0;
    unsigned failed = 0;
    std::uint32_t digest = 0;
    std::string error;  // an exception that escaped the self-test
};

Outcome run_one(const sample::app::Module& module)
{
    Outcome out;
    unsigned passed_before = sample_check_passed();
    unsigned failed_before = sample_check_failed();
    try {
        out.digest = module.run();
    } catch (const std::exception& e) {
        out.error = e.what();
    } catch (...) {
        out.error = "unknown exception";
    }
    out.failed = sample_check_failed() - failed_before;
    out.checks = sample_check_passed() - passed_before + out.failed;
    return out;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc > 1) {
        std::fprintf(stderr, "usage: %s\n(runs the self-check; takes no arguments)\n", argv[0]);
        return 2;
    }

    const auto& modules = sample::app::modules();
    std::printf("sample %s self-check: %zu modules\n", sample_version(), modules.size());

    sample::Digest overall;
    std::vector<std::string> failed_modules;
    for (const auto& module : modules) {
        Outcome o = run_one(module);
        bool ok = o.failed == 0 && o.error.empty();
        std::printf("  %-18s %4u checks  %08x  %s\n", module.name.c_str(), o.checks,
                    static_cast<unsigned>(o.digest), ok ? "ok" : "FAILED");
        if (!o.error.empty())
            std::fprintf(stderr, "%s: exception: %s\n", module.name.c_str(), o.error.c_str());
        if (!ok)
            failed_modules.push_back(module.name);
        overall.add(module.name).add(o.digest);
    }

    unsigned passed = sample_check_passed(), failed = sample_check_failed();
    std::printf("checks: %u passed, %u failed\n", passed, failed);
    std::printf("digest: %08x\n", static_cast<unsigned>(overall.value()));
    if (failed_modules.empty()) {
        std::printf("sample: ok\n");
        return 0;
    }
    std::string names;
    for (const auto& name : failed_modules)
        names += (names.empty() ? "" : ", ") + name;
    std::printf("sample: FAILED (%zu of %zu modules: %s)\n", failed_modules.size(), modules.size(),
                names.c_str());
    return 1;
}
