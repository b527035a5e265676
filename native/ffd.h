// First-fit-decreasing bin packing of one round of pending sequences.
//
// Pure computation on span lengths (already rounded up to the alignment); no lock, no thread.
// The dispatcher owns one packer and calls it only from the packing thread; it keeps its work
// arrays between rounds, so a round allocates nothing once they have grown.
//
// Order: items are placed by decreasing span, ties by increasing index (so callers that list items
// in submission order get a deterministic, reproducible packing); each goes into the lowest-numbered
// bin with room (tokens and sequence count); a new bin opens when none has. Within a bin, items keep
// placement order. The result is prefix-stable: packing only the items of bins k+1.. again gives
// the same bins, which lets the dispatcher emit the first bins now and carry the rest.
//
// Fairness: the first `num_first` items (callers list items oldest first) are placed before the
// others, in index order, so the oldest waiting sequence always lands in bin 0 — the bin emitted
// next — however large the items that arrived after it. The rest follow by decreasing span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace telesum {

class FfdPacker {
public:
    FfdPacker(int64_t token_budget, int64_t max_seqs_per_bin);

    // Packs items 0..n-1 with the given spans (each 1..token_budget); items 0..num_first-1 are
    // placed first, in index order. Replaces the previous result.
    void pack(const int64_t* spans, size_t n, size_t num_first = 0);

    size_t num_bins() const { return bin_used_.size(); }
    // Items of bin b in placement order: bin_items() + bin_begin(b) .. bin_items() + bin_end(b).
    const int32_t* bin_items() const { return bin_items_.data(); }
    size_t bin_begin(size_t b) const { return static_cast<size_t>(bin_offsets_[b]); }
    size_t bin_end(size_t b) const { return static_cast<size_t>(bin_offsets_[b + 1]); }
    int64_t bin_tokens(size_t b) const { return bin_used_[b]; }

    int64_t token_budget() const { return token_budget_; }
    int64_t max_seqs_per_bin() const { return max_seqs_; }

private:
    int64_t token_budget_;
    int64_t max_seqs_;
    std::vector<uint64_t> order_;       // sort keys: (budget - span) << 32 | index
    std::vector<int32_t> assign_;       // item -> bin
    std::vector<int64_t> bin_used_;     // tokens per bin
    std::vector<int32_t> bin_count_;    // items per bin
    std::vector<int32_t> bin_offsets_;  // [num_bins + 1] into bin_items_
    std::vector<int32_t> bin_items_;    // items grouped by bin, placement order
};

}  // namespace telesum
