#include "lorabench/metrics/memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace lorabench::metrics {

namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_window_peak{0};
std::atomic<bool> g_installed{false};

void raise_to(std::atomic<int64_t>& peak, int64_t now) {
  int64_t p = peak.load();
  while (now > p && !peak.compare_exchange_weak(p, now)) {
  }
}

void note_alloc(int64_t n) {
  int64_t now = g_current.fetch_add(n) + n;
  raise_to(g_peak, now);
  raise_to(g_window_peak, now);
}

// Sizes of live allocations by pointer: raw_deallocate (used by oneDNN) passes no size.
class SizeTable {
 public:
  void put(void* p, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = n;
  }
  int64_t take(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return 0;
    int64_t n = it->second;
    sizes_.erase(it);
    return n;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, int64_t> sizes_;
};

SizeTable& sizes() {
  static SizeTable* t = new SizeTable();  // never destroyed: tensors may be freed during static teardown
  return *t;
}

// Wraps the default CPU allocator. c10's raw_allocate() requires the DataPtr's context to be the data
// pointer itself (and raw_deallocate() hands only that pointer to raw_deleter()), so sizes are kept in
// a table keyed by pointer and one deleter serves both paths.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* ptr = inner.get();
    if (ptr == nullptr) return inner;
    inner.release_context();  // the default CPU allocator's context is the pointer; we free it ourselves
    sizes().put(ptr, static_cast<int64_t>(n));
    note_alloc(static_cast<int64_t>(n));
    return {ptr, ptr, &CountingAllocator::free_counted, inner.device()};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::free_counted; }

  // Host memory: a plain copy (what the wrapped CPU allocator does too).
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static void free_counted(void* ptr) {
    g_current.fetch_sub(sizes().take(ptr));
    base_free()(ptr);
  }

  // The wrapped allocator's deleter for a data pointer (set once at installation).
  static c10::DeleterFnPtr& base_free() {
    static c10::DeleterFnPtr f = nullptr;
    return f;
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void install_memory_counter() {
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true)) return;
  c10::Allocator* base = c10::GetDefaultCPUAllocator();
  static CountingAllocator* alloc = new CountingAllocator(base);
  CountingAllocator::base_free() = base->raw_deleter() ? base->raw_deleter() : &c10::free_cpu;
  c10::SetCPUAllocator(alloc, /*priority=*/0);
}

bool memory_counter_installed() { return g_installed.load(); }
int64_t tensor_bytes_current() { return g_current.load(); }
int64_t tensor_bytes_peak() { return g_peak.load(); }
void reset_tensor_peak() { g_peak.store(g_current.load()); }
int64_t tensor_bytes_window_peak() { return g_window_peak.load(); }
void reset_tensor_window_peak() { g_window_peak.store(g_current.load()); }

}  // namespace lorabench::metrics
