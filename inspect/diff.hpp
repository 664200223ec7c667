#pragma once
// Comparing two traces value by value: the first value that diverges is where two runs
// (or attngraph and PyTorch) part ways.
#include <optional>
#include <string>
#include <vector>

#include "inspect/trace_dir.hpp"

namespace attngraph::inspect {

struct DiffOptions {
    double rtol = 1e-5;  ///< element ok when |a - b| <= atol + rtol·|b| (numpy.allclose)
    double atol = 1e-6;
};

/// @brief One compared value.
struct DiffRow {
    std::string name;
    std::string status;  ///< "ok", "DIFFERS", "SHAPE", "only in A", "only in B"
    Shape shape_a, shape_b;
    double max_abs = 0;   ///< largest |a - b| (inf when non-finite patterns differ)
    double max_rel = 0;   ///< largest |a - b| / |b| (over elements with b != 0)
    std::size_t bad = 0;  ///< elements out of tolerance
    std::size_t count = 0;
    bool diverges() const { return status == "DIFFERS" || status == "SHAPE"; }
};

/// @brief Rows in A's order (its manifest: topological), then values only B has.
/// NaN matches NaN and ±Inf matches the same infinity.
struct DiffResult {
    std::vector<DiffRow> rows;
    std::optional<std::string> first_divergent;
    std::size_t compared = 0, divergent = 0;
};

DiffResult diff_traces(const TraceDir& a, const TraceDir& b, const DiffOptions& options = {});

/// One element: (|a - b| within atol + rtol·|b|) or the same non-finite value.
bool within_tolerance(double a, double b, const DiffOptions& options);

}  // namespace attngraph::inspect
