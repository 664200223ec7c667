#include "engine/buffer_pool.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include <sys/sysinfo.h>

#include "engine/sanitizers.hpp"
#ifdef ATTNGRAPH_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace attngraph {

namespace {

using Clock = std::chrono::steady_clock;

// Under AddressSanitizer a waiting buffer is poisoned: a read or write through a pointer kept
// from the value it held (a use after its release, which the pool would otherwise hide) is
// reported as ASan reports a use after free.
void poison(Tensor& t, bool on) {
#ifdef ATTNGRAPH_ASAN
    t.visit([&](auto& a) {
        if (on)
            ASAN_POISON_MEMORY_REGION(a.data(), a.size() * sizeof(*a.data()));
        else
            ASAN_UNPOISON_MEMORY_REGION(a.data(), a.size() * sizeof(*a.data()));
    });
#else
    (void)t;
    (void)on;
#endif
}

struct Pooled {
    Tensor buffer;  // a flat array of `count` elements
    std::size_t count = 0;
    std::size_t bytes = 0;
    Clock::time_point since;
};

class BufferPool {
public:
    void give(Tensor&& t) {
        const std::size_t count = t.size();
        const std::size_t bytes = count * (t.dtype() == DType::f32 ? sizeof(float) : sizeof(double));
        std::vector<Pooled> freed;  // freed after the lock is let go
        std::lock_guard<std::mutex> lock(m_mutex);
        expire(Clock::now(), freed);
        // too big to keep: t is freed by the caller
        if (bytes > m_max_bytes) return;
        while (!m_waiting.empty() && m_bytes + bytes > m_max_bytes) drop(0, freed);  // the oldest
        t.visit([&](auto& a) { a.reshape({count}); });
        poison(t, true);
        m_waiting.push_back(Pooled{std::move(t), count, bytes, Clock::now()});
        m_bytes += bytes;
        ++m_returned;
    }

    template <class T>
    bool take(Array<T>& out, const Shape& shape) {
        const std::size_t count = element_count(shape);
        std::vector<Pooled> freed;
        std::lock_guard<std::mutex> lock(m_mutex);
        expire(Clock::now(), freed);
        for (std::size_t i = m_waiting.size(); i-- > 0;) {  // the newest first: its pages are warmest
            Pooled& p = m_waiting[i];
            if (p.count != count || p.buffer.dtype() != dtype_of<T>()) continue;
            poison(p.buffer, false);
            out = std::move(p.buffer.as<T>());
            out.reshape(shape);
            m_bytes -= p.bytes;
            m_waiting.erase(m_waiting.begin() + static_cast<std::ptrdiff_t>(i));
            ++m_taken;
            return true;
        }
        return false;
    }

    BufferPoolStats stats() {
        std::lock_guard<std::mutex> lock(m_mutex);
        return {m_waiting.size(), m_bytes, m_returned, m_taken};
    }

    void release() {
        std::vector<Pooled> freed;
        std::lock_guard<std::mutex> lock(m_mutex);
        while (!m_waiting.empty()) drop(0, freed);
    }

    std::size_t max_bytes() const { return m_max_bytes; }

private:
    void drop(std::size_t i, std::vector<Pooled>& freed) {
        poison(m_waiting[i].buffer, false);
        m_bytes -= m_waiting[i].bytes;
        freed.push_back(std::move(m_waiting[i]));
        m_waiting.erase(m_waiting.begin() + static_cast<std::ptrdiff_t>(i));
    }
    void expire(Clock::time_point now, std::vector<Pooled>& freed) {
        while (!m_waiting.empty() && now - m_waiting.front().since > buffer_pool_max_age) drop(0, freed);
    }
    static std::size_t machine_bytes() {
        struct sysinfo info {};
        if (sysinfo(&info) == 0) return static_cast<std::size_t>(info.totalram) * info.mem_unit;
        return std::size_t(8) << 30;
    }

    std::mutex m_mutex;
    std::vector<Pooled> m_waiting;  // oldest first
    std::size_t m_bytes = 0;
    std::size_t m_returned = 0;
    std::size_t m_taken = 0;
    const std::size_t m_max_bytes = machine_bytes() / 8;
};

BufferPool& pool() {
    // never destroyed: a value may be let go by a static destructor after this one would run
    static auto* p = new BufferPool();
    return *p;
}

}  // namespace

std::size_t buffer_pool_max_bytes() {
    return pool().max_bytes();
}

std::shared_ptr<const Tensor> share_pooled(Tensor&& t) {
    const std::size_t bytes = t.size() * (t.dtype() == DType::f32 ? sizeof(float) : sizeof(double));
    if (bytes < buffer_pool_min_bytes) return std::make_shared<const Tensor>(std::move(t));
    return std::shared_ptr<const Tensor>(new Tensor(std::move(t)), [](const Tensor* p) {
        // the last reference: nobody reads the value any more, its buffer may be reused
        std::unique_ptr<Tensor> owned(const_cast<Tensor*>(p));
        try {
            pool().give(std::move(*owned));
        } catch (...) {  // no memory for the pool's list: the buffer is freed instead
        }
    });
}

template <class T>
bool take_pooled(Array<T>& a, const Shape& shape) {
    return pool().take(a, shape);
}
template bool take_pooled<float>(Array<float>&, const Shape&);
template bool take_pooled<double>(Array<double>&, const Shape&);

BufferPoolStats buffer_pool_stats() {
    return pool().stats();
}

void release_buffer_pool() {
    pool().release();
}

}  // namespace attngraph
