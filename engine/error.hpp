#pragma once
// Typed exceptions. Library code throws these; only the CLI turns them into an exit code.
#include <stdexcept>
#include <string>

namespace attngraph {

/// @brief Base of every error attngraph reports about its input.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// @brief A graph that is not well formed: unknown op or attribute, bad name, cycle, arity.
struct GraphError : Error {
    using Error::Error;
};

/// @brief Input shapes that an op's shape rule rejects.
struct ShapeError : Error {
    using Error::Error;
};

/// @brief Tensor values an op cannot use, found while running (an index out of range).
/// The executor prefixes the node's name and op.
struct ValueError : Error {
    using Error::Error;
};

/// @brief A file that cannot be read or written (graph file, .npy, trace directory).
struct IoError : Error {
    using Error::Error;
};

}  // namespace attngraph
