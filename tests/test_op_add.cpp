// Add: shape rule (broadcasting), forward against hand-computed sums, backward against
// central finite differences.
#include <boost/test/unit_test.hpp>

#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "ops/ops.hpp"
#include "support/op_test.hpp"

BOOST_AUTO_TEST_SUITE(test_op_add)  // one suite a file: the op tests share one program (tests/CMakeLists.txt)

using namespace attngraph;
using namespace attngraph::test;

namespace {
nlohmann::json no_attrs() {
    op_attrs("Add", nullptr);  // parses
    return nullptr;
}
}  // namespace

BOOST_AUTO_TEST_CASE(shape_rule_broadcasts) {
    BOOST_TEST((infer("Add", no_attrs(), {{2, 3}, {3}})[0] == Shape{2, 3}));
    BOOST_TEST((infer("Add", no_attrs(), {{2, 1, 4}, {3, 1}})[0] == Shape{2, 3, 4}));
    BOOST_TEST((infer("Add", no_attrs(), {{5, 2, 4, 4}, {2, 4, 4}})[0] == Shape{5, 2, 4, 4}));
    BOOST_CHECK_THROW(infer("Add", no_attrs(), {{2, 3}, {4}}), ShapeError);
    BOOST_CHECK_THROW(infer("Add", no_attrs(), {{2, 3, 4}, {3, 3}}), ShapeError);
}

BOOST_AUTO_TEST_CASE(bad_shape_names_node_and_shapes) {
    GraphBuilder g("t");
    Value a = g.input("a", zeros(DType::f32, {2, 3})), b = g.input("b", zeros(DType::f32, {4}));
    try {
        add(a, b).named("sum");
        BOOST_FAIL("no error");
    } catch (const ShapeError& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("(Add)") != std::string::npos);
        BOOST_TEST(msg.find("2x3") != std::string::npos);
        BOOST_TEST(msg.find("(4)") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(forward_hand_computed) {
    const auto y =
        forward_all<double>("Add", no_attrs(), {array_of({2, 3}, {1, 2, 3, 4, 5, 6}), array_of({3}, {10, 20, 30})});
    BOOST_TEST(max_diff(y[0], array_of({2, 3}, {11, 22, 33, 14, 25, 36})) == 0.0);
    // (2,1) + (1,3): an outer sum
    const auto z = forward_all<double>("Add", no_attrs(), {array_of({2, 1}, {1, 2}), array_of({1, 3}, {10, 20, 30})});
    BOOST_TEST(max_diff(z[0], array_of({2, 3}, {11, 21, 31, 12, 22, 32})) == 0.0);
    // a bias (h, n, m) over a batch (B, h, n, m)
    const auto w =
        forward_all<double>("Add", no_attrs(), {array_of({2, 1, 1, 2}, {1, 2, 3, 4}), array_of({1, 1, 2}, {-1, -2})});
    BOOST_TEST(max_diff(w[0], array_of({2, 1, 1, 2}, {0, 0, 2, 2})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_sums_over_broadcast_axes) {
    // dy of ones: db for a (2,3) + (3) is the column count 2 per entry
    const Array<double> a = random_array({2, 3}, 1), b = random_array({3}, 2),
                        dy = array_of({2, 3}, {1, 1, 1, 1, 1, 1});
    const auto d = backward_direct<double>("Add", no_attrs(), {a, b}, {&dy}, {true, true});
    BOOST_TEST(max_diff(d[1], array_of({3}, {2, 2, 2})) == 0.0);
    BOOST_TEST(max_diff(d[0], array_of({2, 3}, {1, 1, 1, 1, 1, 1})) == 0.0);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
    BOOST_TEST(gradcheck("Add", no_attrs(), {random_array({2, 3}, 1), random_array({2, 3}, 2)}) < 1e-8);
    BOOST_TEST(gradcheck("Add", no_attrs(), {random_array({2, 3, 4}, 3), random_array({3, 1}, 4)}) < 1e-8);
    BOOST_TEST(gradcheck("Add", no_attrs(), {random_array({1, 4}, 5), random_array({3, 1}, 6)}) < 1e-8);
    BOOST_TEST(gradcheck("Add", no_attrs(), {random_array({2, 3}, 7), random_array({3}, 8)}, {false, true}) < 1e-8);
}

BOOST_AUTO_TEST_SUITE_END()
