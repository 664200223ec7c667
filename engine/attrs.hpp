#pragma once
// Op attributes are plain structs adapted with BOOST_HANA_ADAPT_STRUCT. The routines here
// read them from JSON, write them to JSON and render them as text: one generic
// hana::for_each each, so an op never parses its own attributes.
//
// A member with a default initializer is optional in JSON; a member of type
// Required<T> must be present; a std::optional<T> member may be absent or null.
#include <algorithm>
#include <climits>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/hana.hpp>
#include <nlohmann/json.hpp>

#include "engine/error.hpp"

namespace attngraph {

/// @brief An attribute the graph must give (no default).
template <class T>
struct Required {
    T value{};
    operator const T&() const { return value; }
    bool operator==(const Required&) const = default;
};

/// @brief A JSON value as an error message shows it: scalars as written (long strings cut),
/// lists and objects by size only (so a deeply nested value is never printed recursively).
inline std::string json_brief(const nlohmann::json& j) {
    if (j.is_array()) return "a list of " + std::to_string(j.size()) + (j.size() == 1 ? " item" : " items");
    if (j.is_object()) return "an object of " + std::to_string(j.size()) + (j.size() == 1 ? " key" : " keys");
    if (j.is_string() && j.get_ref<const std::string&>().size() > 40)
        return nlohmann::json(j.get_ref<const std::string&>().substr(0, 40)).dump(-1, ' ', false,
                                                                                nlohmann::json::error_handler_t::replace) +
               "...";
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace detail {

template <class T>
struct attr_kind {
    static constexpr bool required = false;
    static constexpr bool optional = false;
};
template <class T>
struct attr_kind<Required<T>> {
    static constexpr bool required = true;
    static constexpr bool optional = false;
};
template <class T>
struct attr_kind<std::optional<T>> {
    static constexpr bool required = false;
    static constexpr bool optional = true;
};

// declared first: the templates below call each other (a list of optionals, ...)
template <class T>
void attr_read(const nlohmann::json& j, std::vector<T>& out);
inline void attr_read(const nlohmann::json& j, double& out);
inline void attr_read(const nlohmann::json& j, int& out);

template <class T>
void attr_read(const nlohmann::json& j, T& out) {
    out = j.get<T>();
}
template <class T>
void attr_read(const nlohmann::json& j, Required<T>& out) {
    attr_read(j, out.value);
}
template <class T>
void attr_read(const nlohmann::json& j, std::optional<T>& out) {
    if (j.is_null()) {
        out.reset();
    } else {
        T value{};
        attr_read(j, value);
        out = std::move(value);
    }
}
inline void attr_read(const nlohmann::json& j, double& out) {
    if (!j.is_number()) throw nlohmann::json::type_error::create(302, "expected a number", &j);
    out = j.get<double>();
}
inline void attr_read(const nlohmann::json& j, int& out) {
    if (!j.is_number_integer()) throw nlohmann::json::type_error::create(302, "expected an integer", &j);
    const auto wide = j.get<long long>();
    if (j.is_number_unsigned() ? j.get<unsigned long long>() > INT_MAX : wide < INT_MIN || wide > INT_MAX)
        throw nlohmann::json::type_error::create(302, "integer out of range", &j);
    out = static_cast<int>(wide);
}
// element by element, so that a list of ints refuses 1.5, true and "1" as a single int does
template <class T>
void attr_read(const nlohmann::json& j, std::vector<T>& out) {
    if (!j.is_array()) throw nlohmann::json::type_error::create(302, "expected a list", &j);
    out.clear();
    for (const auto& item : j) {
        T value{};
        attr_read(item, value);
        out.push_back(std::move(value));
    }
}

template <class T>
nlohmann::json attr_write(const T& v) { return nlohmann::json(v); }
template <class T>
nlohmann::json attr_write(const Required<T>& v) { return attr_write(v.value); }
template <class T>
nlohmann::json attr_write(const std::optional<T>& v) { return v ? attr_write(*v) : nlohmann::json(); }

}  // namespace detail

/// @brief Reads an attribute struct from a JSON object; `where` prefixes every error.
/// Unknown keys, missing required keys and wrongly typed values throw GraphError.
template <class A>
A attrs_from_json(const nlohmann::json& j, const std::string& where) {
    namespace hana = boost::hana;
    A attrs{};
    if (j.is_null()) {
        // no "attrs" key: every member keeps its default
    } else if (!j.is_object()) {
        throw GraphError(where + ": \"attrs\" must be an object");
    }
    std::vector<std::string> known;
    hana::for_each(hana::accessors<A>(), [&](auto pair) {
        const std::string key = hana::to<const char*>(hana::first(pair));
        auto& member = hana::second(pair)(attrs);
        using M = std::decay_t<decltype(member)>;
        known.push_back(key);
        if (!j.is_object() || !j.contains(key)) {
            if constexpr (detail::attr_kind<M>::required)
                throw GraphError(where + ": missing required attribute '" + key + "'");
            return;
        }
        try {
            detail::attr_read(j.at(key), member);
        } catch (const nlohmann::json::exception&) {
            throw GraphError(where + ": attribute '" + key + "' has the wrong type (" + json_brief(j.at(key)) + ")");
        }
    });
    if (j.is_object()) {
        for (const auto& [key, value] : j.items()) {
            if (std::find(known.begin(), known.end(), key) == known.end()) {
                std::string list;
                for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
                throw GraphError(where + ": unknown attribute '" + key + "' (known: " +
                                 (list.empty() ? "none" : list) + ")");
            }
        }
    }
    return attrs;
}

/// @brief Writes every member of an attribute struct (absent optionals are skipped).
template <class A>
nlohmann::json attrs_to_json(const A& attrs) {
    namespace hana = boost::hana;
    nlohmann::json j = nlohmann::json::object();
    hana::for_each(hana::accessors<A>(), [&](auto pair) {
        nlohmann::json v = detail::attr_write(hana::second(pair)(attrs));
        if (!v.is_null()) j[hana::to<const char*>(hana::first(pair))] = std::move(v);
    });
    return j;
}

/// @brief "factor=0.707107, axis=-1": the attributes as they appear in trace text.
template <class A>
std::string attrs_to_text(const A& attrs) {
    std::string text;
    for (const auto& [key, value] : attrs_to_json(attrs).items()) {
        if (!text.empty()) text += ", ";
        text += key + "=" + value.dump();
    }
    return text;
}

}  // namespace attngraph
