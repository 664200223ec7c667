#define BOOST_TEST_MODULE attngraph
#include <boost/test/unit_test.hpp>
