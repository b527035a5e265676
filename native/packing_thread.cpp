// The dispatcher's packing thread: decide, pack first-fit-decreasing, write bins into slots.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "dispatcher.h"

namespace telesum {

namespace {
int64_t align_up(int64_t n, int64_t alignment) { return (n + alignment - 1) / alignment * alignment; }
}  // namespace

void Dispatcher::run() {
    std::unique_lock<std::mutex> lk(mu_);
    int64_t seen_arrived = 0;
    while (!stop_) {
        const double now = now_s();
        window_.observe_arrivals(now, arrived_tokens_ - seen_arrived);
        seen_arrived = arrived_tokens_;
        if (closing_ && queued_seqs_ == 0) {
            drained_ = true;
            ready_cv_.notify_all();
            room_cv_.notify_all();
            return;
        }
        WindowDecision d;
        if (closing_ && queued_seqs_ > 0) {
            d.action = PackAction::kPackAll;
        } else if (queued_seqs_ > 0) {
            const double oldest = !carried_.empty() ? carried_.front().arrival_s : incoming_.front().arrival_s;
            const double gpu_since = ((waiting_consumers_ > 0 || gpu_wants_bin_) && ready_.empty())
                                         ? gpu_waiting_since_s_
                                         : std::numeric_limits<double>::quiet_NaN();
            d = window_.decide(now, queued_tokens_, queued_seqs_, oldest, gpu_since);
        }
        if (d.action == PackAction::kWait) {
            kick_ = false;
            packer_idle_ = true;
            auto pred = [&] { return stop_ || kick_; };
            if (std::isinf(d.wake_at_s)) {
                packer_cv_.wait(lk, pred);
            } else {
                const auto at = epoch_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(d.wake_at_s));
                packer_cv_.wait_until(lk, at, pred);
            }
            packer_idle_ = false;
            continue;
        }
        if (free_slots_.empty()) {
            packer_cv_.wait(lk, [&] { return stop_ || !free_slots_.empty(); });
            continue;
        }
        const int free_slots = static_cast<int>(free_slots_.size());
        absorb_buf_.swap(incoming_);
        lk.unlock();
        for (Pending& p : absorb_buf_) carried_.push_back(std::move(p));
        absorb_buf_.clear();
        pack_round_unlocked(d.action, free_slots);
        lk.lock();
    }
}

void Dispatcher::pack_round_unlocked(PackAction action, int free_slots) {
    const size_t n = carried_.size();
    if (n == 0) return;
    spans_.resize(n);
    for (size_t i = 0; i < n; ++i) spans_[i] = align_up(carried_[i].len, config_.alignment);
    // Fairness: carried_ is in arrival order, so the sequences past the latency cap are a prefix;
    // they (and at least the oldest) are placed first, in arrival order, and so make the bins
    // emitted now. Plain FFD would put a long record's pieces ahead of them round after round
    // (measured in worker/benchmarks/window_sim.py: short p99 from seconds to ~4x the cap).
    const double overdue_before = now_s() - config_.latency_cap_s;
    size_t num_first = 1;
    while (num_first < n && carried_[num_first].arrival_s <= overdue_before) ++num_first;
    packer_.pack(spans_.data(), n, num_first);
    const size_t num_bins = packer_.num_bins();

    size_t emit = num_bins;
    if (action == PackAction::kPackOne) {
        emit = 1;
    } else if (action == PackAction::kPackFull) {
        // The last bin holds what did not fit elsewhere: carry it unless it is already (nearly) full,
        // so later arrivals can still join it.
        const int64_t slack = config_.token_budget / 64;
        emit = packer_.bin_tokens(num_bins - 1) >= config_.token_budget - slack ? num_bins : num_bins - 1;
    }
    emit = std::min(emit, static_cast<size_t>(free_slots));
    if (emit == 0) return;

    std::vector<int>& slots = round_slots_;
    slots.resize(emit);
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t b = 0; b < emit; ++b) {
            slots[b] = free_slots_.back();
            free_slots_.pop_back();
            slot_state_[static_cast<size_t>(slots[b])] = SlotState::kWriting;
        }
    }

    std::vector<BinInfo>& infos = round_infos_;
    infos.resize(emit);
    for (size_t b = 0; b < emit; ++b) write_bin(b, slots[b], infos[b]);

    // Carry the sequences of the bins not emitted, keeping arrival order; free the written ones.
    emitted_.assign(n, 0);
    int64_t seqs = 0, real = 0, pads = 0;
    double wait_sum = 0.0, wait_max = 0.0;
    const double now = now_s();
    for (size_t b = 0; b < emit; ++b) {
        for (size_t k = packer_.bin_begin(b); k < packer_.bin_end(b); ++k) {
            const Pending& p = carried_[static_cast<size_t>(packer_.bin_items()[k])];
            emitted_[static_cast<size_t>(packer_.bin_items()[k])] = 1;
            done_blocks_.push_back(p.tokens);
            wait_sum += now - p.arrival_s;
            wait_max = std::max(wait_max, now - p.arrival_s);
        }
        seqs += infos[b].num_seqs;
        real += infos[b].num_real_tokens;
        pads += infos[b].num_tokens - infos[b].num_real_tokens;
    }
    keep_buf_.clear();
    for (size_t i = 0; i < n; ++i) {
        if (!emitted_[i]) keep_buf_.push_back(std::move(carried_[i]));
    }
    carried_.swap(keep_buf_);
    keep_buf_.clear();
    pool_.give_back(done_blocks_.data(), done_blocks_.size());
    done_blocks_.clear();

    std::lock_guard<std::mutex> lk(mu_);
    for (size_t b = 0; b < emit; ++b) {
        slot_state_[static_cast<size_t>(infos[b].slot)] = SlotState::kReady;
        ready_.push_back(infos[b]);
    }
    queued_tokens_ -= real;
    queued_seqs_ -= seqs;
    stats_.sequences_packed += seqs;
    stats_.tokens_packed += real;
    stats_.pad_tokens += pads;
    stats_.bins += static_cast<int64_t>(emit);
    stats_.rounds += 1;
    stats_.wait_max_s = std::max(stats_.wait_max_s, wait_max);
    wait_sum_s_ += wait_sum;
    ready_cv_.notify_all();
    if (room_waiters_ > 0) room_cv_.notify_all();
}

void Dispatcher::write_bin(size_t bin, int slot, BinInfo& info) const {
    const SlotBuffers& s = slots_[static_cast<size_t>(slot)];
    int64_t pos = 0, real = 0, k = 0;
    s.cu_seqlens[0] = 0;
    for (size_t j = packer_.bin_begin(bin); j < packer_.bin_end(bin); ++j, ++k) {
        const Pending& p = carried_[static_cast<size_t>(packer_.bin_items()[j])];
        const int64_t span = align_up(p.len, config_.alignment);
        std::memcpy(s.input_ids + pos, p.tokens.data, static_cast<size_t>(p.len) * sizeof(int32_t));
        std::fill(s.input_ids + pos + p.len, s.input_ids + pos + span, config_.pad_id);
        // Positions restart at 0 per sequence; pads continue the count (they are never attended).
        std::memcpy(s.position_ids + pos, iota_.data(), static_cast<size_t>(span) * sizeof(int32_t));
        s.seq_ids[k] = p.seq_id;
        s.seq_lens[k] = static_cast<int32_t>(p.len);
        s.last_token_index[k] = static_cast<int32_t>(pos + p.len - 1);
        pos += span;
        real += p.len;
        s.cu_seqlens[k + 1] = static_cast<int32_t>(pos);
    }
    info.slot = slot;
    info.num_seqs = k;
    info.num_tokens = pos;
    info.num_real_tokens = real;
}

}  // namespace telesum
