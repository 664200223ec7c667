// engine/attention_gemm.hpp's kernels, every set this CPU can run (AVX-512 and AVX2 + FMA on
// an AVX-512 machine), against plain loops of std::fma written here: each element is one
// multiply-add chain in order, so the bits are equal. Sizes cross the register tiles' edges
// (rows, keys, value columns) and the key panels'; key spans start and end inside panels;
// nothing outside the span asked for is written. The fused step runs on them in
// test_fused_attention.cpp (f32, 300 keys), against a plain-loop attention in double and the
// plain nodes (whose MatMuls are OpenBLAS's).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "engine/attention_gemm.hpp"

BOOST_AUTO_TEST_SUITE(test_attention_gemm)

using namespace attngraph;

namespace {

std::vector<float> random_values(std::size_t count, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (float& x : v) x = dist(gen);
    return v;
}

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

constexpr float sentinel = 12345.0f;

}  // namespace

BOOST_AUTO_TEST_CASE(there_are_kernels_on_x86_64) {
#if defined(__x86_64__)
    // every x86-64 CPU the project runs on has AVX2 + FMA (the CI machines have AVX-512)
    BOOST_TEST(!attention_gemm::runnable().empty());
    BOOST_TEST(attention_gemm::kernels() == attention_gemm::runnable().front());
#endif
}

// (the keys and elements past the last multiple of 4 take pack_keys's element loop, the
// rest its 4 × 4 transposes: sizes on both sides of each edge)
BOOST_AUTO_TEST_CASE(packed_keys_are_panels_of_32_zero_padded) {
    const std::pair<std::size_t, std::size_t> sizes[] = {{37, 3}, {37, 8},  {70, 6},   {1, 4},
                                                         {3, 5},  {64, 64}, {100, 67}, {32, 4}};
    for (const auto& [m, dk] : sizes) {
        const std::vector<float> k = random_values(m * dk, 1);
        std::vector<float> packed(attention_gemm::packed_size(m, dk), sentinel);
        const std::size_t panels = (m + 31) / 32;
        BOOST_TEST(packed.size() == panels * 32 * dk);
        attention_gemm::pack_keys(k.data(), m, dk, packed.data());
        for (std::size_t j = 0; j < panels * 32; ++j)
            for (std::size_t d = 0; d < dk; ++d) {
                const float want = j < m ? k[j * dk + d] : 0.0f;
                BOOST_TEST(packed[((j / 32) * dk + d) * 32 + j % 32] == want,
                           "m " << m << " dk " << dk << " key " << j << " d " << d);
            }
    }
}

BOOST_AUTO_TEST_CASE(scores_are_fma_chains_over_dk_on_any_key_span) {
    struct Case {
        std::size_t rows, m, dk, from, to;
    };
    const Case cases[] = {{1, 32, 1, 0, 32},      {12, 64, 64, 0, 64}, {13, 100, 64, 0, 100},
                          {25, 77, 16, 5, 70},    {7, 40, 3, 31, 33},  {30, 96, 80, 17, 18},
                          {128, 160, 64, 0, 160}, {5, 33, 64, 32, 33}, {24, 250, 128, 1, 249}};
    for (const attention_gemm::Kernels* kernels : attention_gemm::runnable())
        for (const Case& c : cases) {
            const std::vector<float> q = random_values(c.rows * c.dk, 2), k = random_values(c.m * c.dk, 3);
            std::vector<float> packed(attention_gemm::packed_size(c.m, c.dk));
            attention_gemm::pack_keys(k.data(), c.m, c.dk, packed.data());
            const std::size_t width = c.to - c.from, lds = width + 3;
            std::vector<float> s(c.rows * lds, sentinel);
            kernels->scores(q.data(), c.rows, c.dk, packed.data(), c.from, c.to, s.data(), lds);
            std::size_t wrong = 0, overwritten = 0;
            for (std::size_t r = 0; r < c.rows; ++r) {
                for (std::size_t j = c.from; j < c.to; ++j) {
                    float want = 0.0f;
                    for (std::size_t d = 0; d < c.dk; ++d) want = std::fma(q[r * c.dk + d], k[j * c.dk + d], want);
                    wrong += !same_bits(s[r * lds + (j - c.from)], want);
                }
                for (std::size_t x = width; x < lds; ++x) overwritten += s[r * lds + x] != sentinel;
            }
            BOOST_TEST(wrong == 0u, kernels->isa << " rows " << c.rows << " m " << c.m << " dk " << c.dk << " keys ["
                                                 << c.from << ", " << c.to << ")");
            BOOST_TEST(overwritten == 0u, kernels->isa << " wrote past its span");
        }
}

BOOST_AUTO_TEST_CASE(weighted_sums_are_fma_chains_over_the_keys) {
    struct Case {
        std::size_t rows, keys, dv_vectors;
    };
    const Case cases[] = {{1, 1, 1}, {6, 64, 4},    {7, 100, 4}, {13, 33, 5}, {20, 7, 3},
                          {3, 0, 2}, {128, 300, 8}, {11, 5, 1},  {9, 513, 2}};
    for (const attention_gemm::Kernels* kernels : attention_gemm::runnable())
        for (const Case& c : cases) {
            const std::size_t dv = c.dv_vectors * kernels->value_width, lda = c.keys + 5;
            const std::vector<float> a = random_values(c.rows * lda, 4), v = random_values(c.keys * dv, 5);
            std::vector<float> o(c.rows * dv + 4, sentinel);
            kernels->weighted_sum(a.data(), lda, c.rows, v.data(), c.keys, dv, o.data());
            std::size_t wrong = 0;
            for (std::size_t r = 0; r < c.rows; ++r)
                for (std::size_t col = 0; col < dv; ++col) {
                    float want = 0.0f;
                    for (std::size_t j = 0; j < c.keys; ++j) want = std::fma(a[r * lda + j], v[j * dv + col], want);
                    wrong += !same_bits(o[r * dv + col], want);
                }
            BOOST_TEST(wrong == 0u, kernels->isa << " rows " << c.rows << " keys " << c.keys << " dv " << dv);
            for (std::size_t x = c.rows * dv; x < o.size(); ++x) BOOST_TEST(o[x] == sentinel);
        }
}

BOOST_AUTO_TEST_CASE(strided_products_are_fma_chains_and_write_their_columns_only) {
    struct Case {
        std::size_t rows, k, n_vectors, b_pad, c_pad;
    };
    const Case cases[] = {{1, 768, 4, 0, 0}, {128, 768, 16, 512, 0}, {7, 33, 3, 5, 2}, {13, 300, 5, 1, 7}};
    for (const attention_gemm::Kernels* kernels : attention_gemm::runnable())
        for (const Case& c : cases)
            for (const bool transposed : {false, true})
                for (const bool accumulate : {false, true}) {
                    const std::size_t n = c.n_vectors * kernels->value_width, ldb = n + c.b_pad, ldc = n + c.c_pad;
                    // A's element (r, i): a[r·ar + i·ac], as stored (rows × k) or transposed (k × rows)
                    const std::size_t lda = transposed ? c.rows + 3 : c.k + 3;
                    const std::size_t ar = transposed ? 1 : lda, ac = transposed ? lda : 1;
                    const std::vector<float> a = random_values((transposed ? c.k : c.rows) * lda, 6),
                                             b = random_values(c.k * ldb, 7), c0 = random_values(c.rows * ldc, 8);
                    std::vector<float> out = c0;
                    for (std::size_t r = 0; r < c.rows; ++r)
                        for (std::size_t j = n; j < ldc; ++j) out[r * ldc + j] = sentinel;
                    kernels->product(a.data(), ar, ac, c.rows, b.data(), ldb, c.k, n, out.data(), ldc, accumulate);
                    std::size_t wrong = 0, overwritten = 0;
                    for (std::size_t r = 0; r < c.rows; ++r) {
                        for (std::size_t j = 0; j < n; ++j) {
                            float want = accumulate ? c0[r * ldc + j] : 0.0f;
                            for (std::size_t i = 0; i < c.k; ++i)
                                want = std::fma(a[r * ar + i * ac], b[i * ldb + j], want);
                            wrong += !same_bits(out[r * ldc + j], want);
                        }
                        for (std::size_t j = n; j < ldc; ++j) overwritten += out[r * ldc + j] != sentinel;
                    }
                    BOOST_TEST(wrong == 0u, kernels->isa << " rows " << c.rows << " k " << c.k << " n " << n
                                                         << (transposed ? " A transposed" : "")
                                                         << (accumulate ? " accumulating" : ""));
                    BOOST_TEST(overwritten == 0u, kernels->isa << " wrote past its columns");
                }
}

BOOST_AUTO_TEST_CASE(non_finite_values_propagate_as_in_a_plain_product) {
    for (const attention_gemm::Kernels* kernels : attention_gemm::runnable()) {
        const std::size_t rows = 3, keys = 40, dv = kernels->value_width;
        std::vector<float> a(rows * keys, 0.0f), v(keys * dv, 1.0f);
        v[7 * dv + 2] = std::numeric_limits<float>::infinity();  // weighed 0: 0·inf is NaN
        a[1 * keys + 9] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> o(rows * dv);
        kernels->weighted_sum(a.data(), keys, rows, v.data(), keys, dv, o.data());
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < dv; ++c) {
                const bool nan = c == 2 || r == 1;
                BOOST_TEST(std::isnan(o[r * dv + c]) == nan, kernels->isa << " row " << r << " column " << c);
                if (!nan) BOOST_TEST(o[r * dv + c] == 0.0f);
            }
    }
}

BOOST_AUTO_TEST_SUITE_END()
