#pragma once
// The HTML report of a trace: one self-contained file (inline CSS, JS and data, nothing
// fetched) showing the graph, each value as a heatmap with its stats and gradient, and
// the attention maps of every head for a chosen query token.
#include <functional>
#include <string>

#include "inspect/trace_dir.hpp"

namespace attngraph::inspect {

struct ReportOptions {
    std::size_t max_side = 256;  ///< matrices larger than this a side are embedded max-|x| pooled
    /// called after each value of the trace with (values done, values in the trace)
    std::function<void(std::size_t, std::size_t)> progress;
};

/// @brief The report page. Loads every value (and gradient) of the trace; throws IoError
/// naming the file on any unreadable one.
std::string report_html(const TraceDir& trace, const ReportOptions& options = {});

}  // namespace attngraph::inspect
