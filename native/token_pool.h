// Recycled storage for submitted tokens: power-of-two blocks kept on per-size free lists.
//
// submit() copies each caller's tokens into a block once; the packing thread copies them from the
// block into a slot and hands the block back. Recycling avoids a heap allocation and a free per
// sequence (and the page faults of memory the allocator returned to the kernel). The pool owns
// every block it ever made until it is destroyed; blocks live at most as long as the queue holds
// their sequence, so the pool grows to about twice the queue capacity at most.
//
// Thread-safe: one mutex (mu_) protects the free lists and the owned list.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace telesum {

class TokenPool {
public:
    struct Block {
        int32_t* data = nullptr;
        int size_class = -1;  // capacity is 1 << size_class tokens
    };

    // A block of at least `len` tokens (uninitialised). Thread-safe.
    Block acquire(int64_t len);
    // Returns blocks for reuse; each must come from acquire() and not be returned twice. Thread-safe.
    void give_back(const Block* blocks, size_t n);

private:
    static constexpr int kMinClass = 6;  // 64 tokens: smaller blocks save little
    std::mutex mu_;
    std::vector<std::vector<int32_t*>> free_;              // (mu_) by size class
    std::vector<std::unique_ptr<int32_t[]>> owned_;        // (mu_) every block made
};

}  // namespace telesum
