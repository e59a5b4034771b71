// digest.hpp - a C++ face for the running digest of digest.h.
//
// C++ self-tests fold their results into a Digest exactly as the C ones do.
#ifndef SAMPLE_CXX_DIGEST_HPP
#define SAMPLE_CXX_DIGEST_HPP

#include <cstdint>
#include <string>
#include <string_view>

#include "sample/digest.h"

namespace sample {

// Accumulates values into a CRC-based digest.
class Digest {
public:
    Digest& add(std::uint32_t v)
    {
        value_ = sample_digest_u32(value_, v);
        return *this;
    }

    Digest& add(std::string_view s)
    {
        value_ = sample_digest_u32(value_, static_cast<std::uint32_t>(s.size()));
        value_ = sample_crc32(value_, s.data(), s.size());
        return *this;
    }

    Digest& add(const std::string& s) { return add(std::string_view(s)); }
    Digest& add(const char* s) { return add(std::string_view(s)); }

    Digest& add_double(double v)
    {
        value_ = sample_digest_double(value_, v);
        return *this;
    }

    std::uint32_t value() const { return value_; }

private:
    std::uint32_t value_ = 0;
};

}  // namespace sample

#endif  // SAMPLE_CXX_DIGEST_HPP
