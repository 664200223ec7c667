#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace attngraph::cli {

namespace {
std::atomic<bool> g_progress_off{false};
}  // namespace

void disable_progress() {
    g_progress_off = true;
}

Progress::Progress(std::string command) : m_command(std::move(command)), m_start(std::chrono::steady_clock::now()) {
    m_enabled = !g_progress_off && ::isatty(STDERR_FILENO) == 1;
    if (!m_enabled) return;
    if (const char* after = std::getenv("ATTNGRAPH_PROGRESS_AFTER")) {
        char* end = nullptr;
        const double v = std::strtod(after, &end);
        if (end != after && v >= 0) m_after = v;
    }
    m_thread = std::thread([this] { ticker(); });
}

Progress::~Progress() {
    finish();
}

void Progress::update(const std::string& phase, std::size_t done, std::size_t total, const char* unit) {
    if (!m_enabled) return;
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_started && phase == m_phase && total == m_total && done < m_done) return;  // an older step's count
    m_phase = phase;
    m_done = done;
    m_total = total;
    m_unit = unit;
    m_started = true;
}

std::function<void(std::size_t, std::size_t)> Progress::callback(std::string phase, const char* unit) {
    if (!m_enabled) return {};
    update(phase, 0, 0, unit);
    return [this, phase = std::move(phase), unit](std::size_t done, std::size_t total) {
        update(phase, done, total, unit);
    };
}

void Progress::draw_locked(bool final) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    if (!m_started || elapsed < m_after) return;
    std::string line = "\r\033[K" + m_command + ": ";
    if (!m_phase.empty()) line += m_phase + " ";
    line += std::to_string(m_done);
    if (m_total) line += "/" + std::to_string(m_total);
    char tail[64];
    std::snprintf(tail, sizeof tail, " %s, %.1f s", m_unit, elapsed);
    line += tail;
    if (final) line += "\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    m_drawn = true;
}

void Progress::ticker() {
    std::unique_lock<std::mutex> lock(m_mutex);
    while (!m_stop) {
        draw_locked(false);
        m_wake.wait_for(lock, std::chrono::milliseconds(200));
    }
}

void Progress::finish() {
    if (!m_enabled) return;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_stop) return;
        m_stop = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable()) m_thread.join();
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_drawn || m_started) draw_locked(true);  // the last state, then the line ends
}

}  // namespace attngraph::cli
