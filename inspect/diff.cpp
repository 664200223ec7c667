#include "inspect/diff.hpp"

#include <cmath>
#include <limits>

namespace attngraph::inspect {

bool within_tolerance(double a, double b, const DiffOptions& o) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::abs(a - b) <= o.atol + o.rtol * std::abs(b);
}

namespace {

DiffRow compare(const std::string& name, const Tensor& a, const Tensor& b, const DiffOptions& o) {
    DiffRow r;
    r.name = name;
    r.shape_a = a.shape();
    r.shape_b = b.shape();
    if (r.shape_a != r.shape_b) {
        r.status = "SHAPE";
        r.max_abs = r.max_rel = std::numeric_limits<double>::infinity();
        return r;
    }
    r.count = a.size();
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = a.at_flat(i), y = b.at_flat(i);
        if (!within_tolerance(x, y, o)) ++r.bad;
        if (!std::isfinite(x) || !std::isfinite(y)) {
            const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
            if (!same) r.max_abs = r.max_rel = std::numeric_limits<double>::infinity();
            continue;
        }
        const double d = std::abs(x - y);
        r.max_abs = std::max(r.max_abs, d);
        if (y != 0)
            r.max_rel = std::max(r.max_rel, d / std::abs(y));
        else if (d > 0)
            r.max_rel = std::numeric_limits<double>::infinity();
    }
    r.status = r.bad ? "DIFFERS" : "ok";
    return r;
}

}  // namespace

DiffResult diff_traces(const TraceDir& a, const TraceDir& b, const DiffOptions& o) {
    DiffResult result;
    // order: the manifest's (topological) of whichever side has one, A first
    const TraceDir& order = a.has_manifest() || !b.has_manifest() ? a : b;
    const TraceDir& other = &order == &a ? b : a;
    const bool a_first = &order == &a;
    for (const auto& e : order.entries()) {
        if (e.file.empty()) continue;
        const auto* f = other.find(e.name);
        DiffRow row;
        if (!f || f->file.empty()) {
            row.name = e.name;
            row.status = a_first ? "only in A" : "only in B";
        } else {
            const Tensor ta = a_first ? order.load(e) : other.load(*f);
            const Tensor tb = a_first ? other.load(*f) : order.load(e);
            row = compare(e.name, ta, tb, o);
            ++result.compared;
        }
        if (row.diverges()) {
            ++result.divergent;
            if (!result.first_divergent) result.first_divergent = row.name;
        }
        result.rows.push_back(std::move(row));
    }
    for (const auto& e : other.entries())
        if (!e.file.empty() && !order.find(e.name)) {
            DiffRow row;
            row.name = e.name;
            row.status = a_first ? "only in B" : "only in A";
            result.rows.push_back(std::move(row));
        }
    return result;
}

}  // namespace attngraph::inspect
