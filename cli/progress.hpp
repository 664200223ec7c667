#pragma once
// The progress line of long commands: "run: 40/120 nodes, 2.1 s" on standard error,
// rewritten in place, only when standard error is a terminal, the command was not given
// --quiet, and the work has taken more than a second (ATTNGRAPH_PROGRESS_AFTER=SECONDS
// changes that delay; 0 shows it at once). Never written to a pipe or a file.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace attngraph::cli {

/// Turns progress lines off for the whole process (main: --quiet).
void disable_progress();

class Progress {
public:
    /// `command` starts the line ("run"); nothing is drawn until update() is called.
    explicit Progress(std::string command);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    /// Sets the current phase ("backward"; "" for none), its count done, its total and the
    /// unit ("nodes"). Thread-safe: the engine calls it from its worker threads.
    void update(const std::string& phase, std::size_t done, std::size_t total, const char* unit);
    /// A callback for RunOptions/BackwardOptions/ReportOptions::progress.
    std::function<void(std::size_t, std::size_t)> callback(std::string phase, const char* unit);
    /// Draws the last state and ends the line (when a line was drawn); the destructor calls it.
    void finish();
    /// Whether a line may be drawn at all (a terminal, not --quiet).
    bool enabled() const { return m_enabled; }

private:
    void draw_locked(bool final);
    void ticker();

    std::string m_command;
    bool m_enabled = false;
    double m_after = 1.0;
    std::chrono::steady_clock::time_point m_start;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::string m_phase;
    const char* m_unit = "nodes";
    std::size_t m_done = 0, m_total = 0;
    bool m_started = false, m_drawn = false, m_stop = false;
    std::thread m_thread;
};

}  // namespace attngraph::cli
