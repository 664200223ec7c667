#pragma once
// The precompiled header of the test programs (tests/CMakeLists.txt): the headers most of
// them include, parsed once per build instead of once per test. A test still includes what it
// uses; this only makes those includes cheap.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/mpl/list.hpp>
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "engine/autodiff.hpp"
#include "engine/builder.hpp"
#include "engine/error.hpp"
#include "engine/executor.hpp"
#include "engine/gradcheck.hpp"
#include "engine/graph_file.hpp"
#include "engine/npy.hpp"
#include "engine/tensor.hpp"
#include "ops/ops.hpp"
#include "helpers.hpp"
#include "op_test.hpp"
