#include "token_pool.h"

namespace telesum {

TokenPool::Block TokenPool::acquire(int64_t len) {
    int cls = kMinClass;
    while ((int64_t{1} << cls) < len) ++cls;
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.size() <= static_cast<size_t>(cls)) free_.resize(static_cast<size_t>(cls) + 1);
    std::vector<int32_t*>& list = free_[static_cast<size_t>(cls)];
    if (!list.empty()) {
        int32_t* data = list.back();
        list.pop_back();
        return {data, cls};
    }
    owned_.emplace_back(new int32_t[size_t{1} << cls]);
    return {owned_.back().get(), cls};
}

void TokenPool::give_back(const Block* blocks, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < n; ++i) free_[static_cast<size_t>(blocks[i].size_class)].push_back(blocks[i].data);
}

}  // namespace telesum
