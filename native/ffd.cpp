#include "ffd.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace telesum {

FfdPacker::FfdPacker(int64_t token_budget, int64_t max_seqs_per_bin)
    : token_budget_(token_budget), max_seqs_(max_seqs_per_bin) {
    if (token_budget <= 0 || token_budget >= (int64_t{1} << 31)) {
        throw std::invalid_argument("token_budget must be in [1, 2^31)");
    }
    if (max_seqs_per_bin <= 0) throw std::invalid_argument("max_seqs_per_bin must be positive");
}

void FfdPacker::pack(const int64_t* spans, size_t n, size_t num_first) {
    if (n >= (size_t{1} << 31)) throw std::invalid_argument("too many items in one round");
    order_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const int64_t span = spans[i];
        if (span <= 0 || span > token_budget_) {
            throw std::invalid_argument("span " + std::to_string(span) + " of item " +
                                        std::to_string(i) + " is outside [1, token_budget]");
        }
        // Sort key (budget - span) << 32 | index; items placed first get the top bit clear and
        // everyone else's set, so they sort before any span and among themselves by index.
        const uint64_t rank = i < num_first ? 0 : (uint64_t{1} << 31) | static_cast<uint64_t>(token_budget_ - span);
        order_[i] = (rank << 32) | static_cast<uint64_t>(i);
    }
    std::sort(order_.begin(), order_.end());

    assign_.resize(n);
    bin_used_.clear();
    bin_count_.clear();
    size_t first_open = 0;  // bins before it are full: no later (smaller or equal) item fits
    for (const uint64_t key : order_) {
        const auto item = static_cast<int32_t>(key & 0xffffffffu);
        const int64_t span = spans[item];
        size_t b = first_open;
        while (b < bin_used_.size() &&
               (bin_used_[b] + span > token_budget_ || bin_count_[b] >= max_seqs_)) {
            ++b;
        }
        if (b == bin_used_.size()) {
            bin_used_.push_back(0);
            bin_count_.push_back(0);
        }
        bin_used_[b] += span;
        bin_count_[b] += 1;
        assign_[item] = static_cast<int32_t>(b);
        // After the first items, spans only shrink, so a bin that cannot take the smallest possible
        // span (1 token) or has hit the count cap never takes another item.
        while (first_open < bin_used_.size() &&
               (bin_used_[first_open] >= token_budget_ || bin_count_[first_open] >= max_seqs_)) {
            ++first_open;
        }
    }

    // Group items by bin, keeping placement order (a counting sort over the sorted order).
    const size_t num_bins = bin_used_.size();
    bin_offsets_.assign(num_bins + 1, 0);
    for (size_t b = 0; b < num_bins; ++b) bin_offsets_[b + 1] = bin_offsets_[b] + bin_count_[b];
    bin_items_.resize(n);
    std::vector<int32_t>& cursor = bin_count_;  // reused as the write cursor per bin
    for (size_t b = 0; b < num_bins; ++b) cursor[b] = bin_offsets_[b];
    for (const uint64_t key : order_) {
        const auto item = static_cast<int32_t>(key & 0xffffffffu);
        bin_items_[cursor[assign_[item]]++] = item;
    }
}

}  // namespace telesum
