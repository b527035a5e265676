// The Python-facing wrapper of Dispatcher: buffer checks, GIL release, slot lifetimes.
//
// Every method is called from Python with the GIL held; each releases it around any call into
// Dispatcher that can wait or lock. The slot arrays stay referenced here (py::object) for the
// dispatcher's whole life, so the packing thread never writes into freed memory; it never sees
// these objects, only the raw pointers registered with Dispatcher::add_slot.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <vector>

#include "dispatcher.h"

namespace telesum {

class PyDispatcher {
public:
    explicit PyDispatcher(const DispatcherConfig& config);
    ~PyDispatcher();  // joins the packing thread (it never takes the GIL, so holding it is safe)

    // Registers one slot from six writable, C-contiguous buffers (int32 except seq_ids int64).
    // Raises TypeError (dtype) / ValueError (shape, read-only, not contiguous). Before start().
    int add_slot(pybind11::object input_ids, pybind11::object position_ids, pybind11::object cu_seqlens,
                 pybind11::object seq_ids, pybind11::object seq_lens, pybind11::object last_token_index);
    void start();
    // `tokens`: a 1-D int32 buffer (numpy array). TypeError otherwise; ValueError if not 1-D.
    void submit(int64_t seq_id, pybind11::handle tokens, int64_t max_new_tokens);
    // Submits a batch under one lock; returns how many (a prefix) were queued. Backpressure only
    // when none fit. `max_new_tokens` applies to every sequence.
    size_t submit_many(pybind11::sequence seq_ids, pybind11::sequence tokens, int64_t max_new_tokens);
    bool wait_for_room(int64_t tokens, std::optional<double> timeout_s);
    // (slot, num_seqs, num_tokens, num_real_tokens) or None on timeout.
    pybind11::object next_bin(std::optional<double> timeout_s);
    void release(int slot);
    void close();
    pybind11::dict stats() const;
    const DispatcherConfig& config() const { return dispatcher_->config(); }
    int num_slots() const { return dispatcher_->num_slots(); }

private:
    std::unique_ptr<Dispatcher> dispatcher_;
    std::vector<pybind11::object> slot_refs_;  // keeps slot memory alive
};

// Packs `spans` first-fit-decreasing (items 0..num_first-1 first, in order); returns the item
// indices of each bin in placement order.
std::vector<std::vector<int32_t>> ffd_pack(const std::vector<int64_t>& spans, int64_t token_budget,
                                           int64_t max_seqs_per_bin, int64_t num_first);

}  // namespace telesum
