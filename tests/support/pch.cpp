// The program that owns tests/support/pch.hpp's precompiled form (tests/CMakeLists.txt); it has
// no tests and is not run.
