// docs/cpp-api.md shows code that compiles: every ```cpp block is a region of
// examples/cpp_api.cpp (between two "// [name]" lines, dedented), every ```cmake block is in
// tests/install/CMakeLists.txt, and each code line of the README's C++ example is a line of
// tests/install/main.cpp (both built: the examples and the install_consumer test).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "support/helpers.hpp"

BOOST_AUTO_TEST_SUITE(test_docs_cpp_api)

using namespace attngraph;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// The ```lang blocks of a markdown text.
std::vector<std::string> blocks(const std::string& markdown, const std::string& lang) {
    std::vector<std::string> out;
    std::string block;
    bool inside = false;
    for (const auto& line : lines_of(markdown)) {
        if (!inside && line == "```" + lang) {
            inside = true;
            block.clear();
        } else if (inside && line == "```") {
            inside = false;
            out.push_back(block);
        } else if (inside) {
            block += line + "\n";
        }
    }
    return out;
}

// The regions of a source file between "// [name]" lines, dedented.
std::vector<std::string> regions(const std::string& source) {
    std::vector<std::string> out;
    const std::regex marker(R"(\s*// \[\w+\]\s*)");
    std::vector<std::string> region;
    bool inside = false;
    for (const auto& line : lines_of(source)) {
        if (std::regex_match(line, marker)) {
            if (inside) {
                std::size_t indent = std::string::npos;
                for (const auto& l : region)
                    if (l.find_first_not_of(' ') != std::string::npos)
                        indent = std::min(indent, l.find_first_not_of(' '));
                std::string text;
                for (const auto& l : region) text += (l.size() >= indent ? l.substr(indent) : "") + "\n";
                out.push_back(text);
            }
            inside = !inside;
            region.clear();
        } else if (inside) {
            region.push_back(line);
        }
    }
    return out;
}

// A line without its // comment, trimmed, runs of spaces made one.
std::string code_of(std::string line) {
    const auto comment = line.find("//");
    if (comment != std::string::npos) line = line.substr(0, comment);
    std::string out;
    for (char c : line)
        if (c != ' ' || (!out.empty() && out.back() != ' ')) out += c;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_cpp_block_is_cut_from_the_example) {
    const std::string doc = test::slurp(test::source_dir() / "docs" / "cpp-api.md");
    const auto cut = regions(test::slurp(test::source_dir() / "examples" / "cpp_api.cpp"));
    const auto shown = blocks(doc, "cpp");
    BOOST_TEST(shown.size() >= 8u);
    BOOST_TEST(cut.size() == shown.size());
    for (const auto& block : shown)
        BOOST_TEST((std::find(cut.begin(), cut.end(), block) != cut.end()), "not in examples/cpp_api.cpp:\n" << block);
}

BOOST_AUTO_TEST_CASE(the_cmake_block_is_the_install_test_project) {
    const std::string doc = test::slurp(test::source_dir() / "docs" / "cpp-api.md");
    const std::string project = test::slurp(test::source_dir() / "tests" / "install" / "CMakeLists.txt");
    const auto shown = blocks(doc, "cmake");
    BOOST_TEST(shown.size() == 1u);
    for (const auto& block : shown) BOOST_TEST(project.find(block) != std::string::npos, block);
}

BOOST_AUTO_TEST_CASE(the_readme_cpp_example_is_the_install_test_program) {
    const auto shown = blocks(test::slurp(test::source_dir() / "README.md"), "cpp");
    BOOST_REQUIRE(!shown.empty());
    std::set<std::string> program;
    for (const auto& line : lines_of(test::slurp(test::source_dir() / "tests" / "install" / "main.cpp")))
        program.insert(code_of(line));
    std::size_t checked = 0;
    for (const auto& line : lines_of(shown[0])) {
        const std::string code = code_of(line);
        if (code.empty()) continue;
        ++checked;
        BOOST_TEST(program.count(code) == 1u, "README line not in tests/install/main.cpp: " << code);
    }
    BOOST_TEST(checked >= 8u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_docs_cpp_api
