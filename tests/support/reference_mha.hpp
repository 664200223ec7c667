#pragma once
// Multi-head self-attention by plain loops in double (no engine code): the independent
// reference that executor and optimiser tests compare Y against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "graphs/mha.hpp"

namespace attngraph::test {

// Y of multi-head attention by plain loops in double, from the same weights.
inline std::vector<double> reference_mha(const graphs::MhaConfig& c, const graphs::MhaWeights& w) {
    const std::size_t n = c.seq, d = c.d_model, h = c.heads, dk = d / h, batches = c.batch ? c.batch : 1;
    auto at = [](const Tensor& t, std::size_t i) { return t.at_flat(i); };
    std::vector<double> y(batches * n * d);
    for (std::size_t b = 0; b < batches; ++b) {
        std::vector<double> concat(n * d);
        for (std::size_t hd = 0; hd < h; ++hd) {
            std::vector<double> q(n * dk), k(n * dk), v(n * dk);
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < dk; ++j) {
                    double sq = at(w.bq[hd], j), sk = at(w.bk[hd], j), sv = at(w.bv[hd], j);
                    for (std::size_t t = 0; t < d; ++t) {
                        const double x = at(w.x, (b * n + i) * d + t);
                        sq += x * at(w.wq[hd], t * dk + j);
                        sk += x * at(w.wk[hd], t * dk + j);
                        sv += x * at(w.wv[hd], t * dk + j);
                    }
                    q[i * dk + j] = sq;
                    k[i * dk + j] = sk;
                    v[i * dk + j] = sv;
                }
            for (std::size_t i = 0; i < n; ++i) {
                std::vector<double> s(n);
                double mx = -INFINITY, sum = 0;
                for (std::size_t j = 0; j < n; ++j) {
                    double dot = 0;
                    for (std::size_t t = 0; t < dk; ++t) dot += q[i * dk + t] * k[j * dk + t];
                    s[j] = dot / std::sqrt(static_cast<double>(dk));
                    mx = std::max(mx, s[j]);
                }
                for (double& e : s) sum += (e = std::exp(e - mx));
                for (std::size_t t = 0; t < dk; ++t) {
                    double o = 0;
                    for (std::size_t j = 0; j < n; ++j) o += s[j] / sum * v[j * dk + t];
                    concat[i * d + hd * dk + t] = o;
                }
            }
        }
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < d; ++j) {
                double acc = at(w.bo, j);
                for (std::size_t t = 0; t < d; ++t) acc += concat[i * d + t] * at(w.wo, t * d + j);
                y[(b * n + i) * d + j] = acc;
            }
    }
    return y;
}

}  // namespace attngraph::test
