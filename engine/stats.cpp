#include "engine/stats.hpp"

#include <cmath>
#include <cstdio>

namespace attngraph {

TensorStats tensor_stats(const Tensor& tensor) {
    TensorStats s;
    s.count = tensor.size();
    std::size_t finite = 0;
    tensor.visit([&](const auto& a) {
        const auto* p = a.data();
        for (std::size_t i = 0; i < a.size(); ++i) {
            const double x = static_cast<double>(p[i]);
            if (!std::isfinite(x)) {
                ++s.nonfinite;
                s.nan += std::isnan(x);
                continue;
            }
            if (finite == 0 || x < s.min) s.min = x;
            if (finite == 0 || x > s.max) s.max = x;
            s.sum += x;
            ++finite;
        }
    });
    if (finite) s.mean = s.sum / static_cast<double>(finite);
    return s;
}

nlohmann::json stats_json(const TensorStats& s) {
    nlohmann::json j;
    const bool any = s.count > s.nonfinite;
    j["min"] = any ? nlohmann::json(s.min) : nlohmann::json();
    j["max"] = any ? nlohmann::json(s.max) : nlohmann::json();
    j["mean"] = any ? nlohmann::json(s.mean) : nlohmann::json();
    j["sum"] = s.sum;
    j["nonfinite"] = s.nonfinite;
    j["nan"] = s.nan;
    j["count"] = s.count;
    return j;
}

std::string stats_text(const TensorStats& s) {
    char buf[160];
    if (s.count == s.nonfinite)
        std::snprintf(buf, sizeof buf, "no finite values");
    else
        std::snprintf(buf, sizeof buf, "min %.6g max %.6g mean %.6g", s.min, s.max, s.mean);
    std::string out = buf;
    if (s.nonfinite) {
        std::snprintf(buf, sizeof buf, " (%zu non-finite: %zu NaN, %zu Inf)", s.nonfinite, s.nan, s.nonfinite - s.nan);
        out += buf;
    }
    return out;
}

}  // namespace attngraph
