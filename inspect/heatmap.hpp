#pragma once
// Matrices as pictures: the colour scale shared by the SVG heatmap and the HTML report,
// max-pooling of matrices too large to show cell by cell, and the SVG heatmap itself.
#include <string>
#include <vector>

#include "inspect/trace_dir.hpp"

namespace attngraph::inspect {

/// @brief Sequential (viridis) for one-signed data, diverging (blue-white-red, symmetric
/// about 0) when the finite values take both signs.
struct ColourScale {
    double lo = 0, hi = 1;
    bool diverging = false;
    /// "#rrggbb"; non-finite values are magenta.
    std::string colour(double value) const;
};
ColourScale colour_scale_for(const std::vector<double>& values);

/// @brief A matrix cut into blocks of row_group x col_group cells, each shown as its
/// element of largest magnitude (sign kept; NaN when the block holds one).
struct PooledMatrix {
    MatrixView view;  ///< the pooled values (rows/cols are block counts)
    std::size_t row_group = 1, col_group = 1;
    std::size_t full_rows = 0, full_cols = 0;
};
/// Pools so that neither side exceeds max_side (no pooling when it already fits).
PooledMatrix pool_matrix(const MatrixView& m, std::size_t max_side);

struct HeatmapOptions {
    std::string title;
    std::vector<std::string> row_labels;  ///< empty or one per (unpooled) row
    std::vector<std::string> col_labels;
    std::size_t max_side = 256;  ///< pool larger matrices to this many blocks a side
};

/// @brief A standalone SVG: cells coloured by value, <title> on each cell giving its row,
/// column and value (hover), token labels on the axes, a colour scale legend.
std::string heatmap_svg(const MatrixView& m, const HeatmapOptions& options);

/// XML/HTML text escaping (& < > " ').
std::string xml_escape(const std::string& text);
/// Display width of UTF-8 text in columns (East Asian wide characters count two).
std::size_t text_columns(const std::string& text);

}  // namespace attngraph::inspect
