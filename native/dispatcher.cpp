#include "dispatcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

namespace telesum {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMaxWaitS = 1e6;  // clamp for timeouts so time_point arithmetic cannot overflow

int64_t align_up(int64_t n, int64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

Clock::time_point deadline_after(double timeout_s) {
    const double t = std::clamp(timeout_s, 0.0, kMaxWaitS);
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
}

WindowConfig window_config(const DispatcherConfig& c) {
    WindowConfig w;
    w.token_budget = c.token_budget;
    w.latency_cap_s = c.latency_cap_s;
    w.adaptive = c.adaptive;
    return w;
}

const DispatcherConfig& validated(const DispatcherConfig& c) {
    if (c.alignment <= 0) throw std::invalid_argument("alignment must be positive");
    if (c.token_budget <= 0 || c.token_budget % c.alignment != 0) {
        throw std::invalid_argument("token_budget must be a positive multiple of alignment");
    }
    if (c.queue_capacity_tokens < c.token_budget) {
        throw std::invalid_argument("queue_capacity_tokens must be at least token_budget");
    }
    return c;
}

}  // namespace

Dispatcher::Dispatcher(const DispatcherConfig& config)
    : config_(validated(config)),
      epoch_(Clock::now()),
      iota_(static_cast<size_t>(config.token_budget)),
      window_(window_config(config)),
      packer_(config.token_budget, config.max_seqs_per_bin) {
    std::iota(iota_.begin(), iota_.end(), 0);
}

Dispatcher::~Dispatcher() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    packer_cv_.notify_all();
    ready_cv_.notify_all();
    room_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

double Dispatcher::now_s() const { return std::chrono::duration<double>(Clock::now() - epoch_).count(); }

int Dispatcher::add_slot(const SlotBuffers& b) {
    if (!b.input_ids || !b.position_ids || !b.cu_seqlens || !b.seq_ids || !b.seq_lens ||
        !b.last_token_index) {
        throw std::invalid_argument("slot buffers must all be non-null");
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) throw std::logic_error("add_slot after start()");
    slots_.push_back(b);
    slot_state_.push_back(SlotState::kFree);
    free_slots_.push_back(static_cast<int>(slots_.size()) - 1);
    return static_cast<int>(slots_.size()) - 1;
}

int Dispatcher::num_slots() const {
    std::lock_guard<std::mutex> lk(mu_);
    return static_cast<int>(slots_.size());
}

void Dispatcher::start() {
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) throw std::logic_error("start() called twice");
    if (closing_) throw ClosedError("dispatcher is closed");
    if (slots_.size() < 2) {
        throw std::logic_error("need at least two slots, have " + std::to_string(slots_.size()));
    }
    started_ = true;
    thread_ = std::thread([this] { run(); });
}

void Dispatcher::kick_locked() {
    if (packer_idle_ && !kick_) {
        kick_ = true;
        packer_cv_.notify_one();
    }
}

void Dispatcher::check_item(const SubmitItem& item) const {
    if (item.len <= 0) throw std::invalid_argument("empty sequence (seq_id " + std::to_string(item.seq_id) + ")");
    if (item.max_new_tokens < 0 || item.max_new_tokens > std::numeric_limits<int32_t>::max()) {
        throw std::invalid_argument("max_new_tokens must be in [0, 2^31), got " + std::to_string(item.max_new_tokens));
    }
    if (align_up(item.len, config_.alignment) > config_.token_budget) {
        throw SequenceTooLongError("sequence " + std::to_string(item.seq_id) + " has " + std::to_string(item.len) +
                                   " tokens; one bin holds " + std::to_string(config_.token_budget) +
                                   " (alignment " + std::to_string(config_.alignment) + ")");
    }
}

void Dispatcher::submit(int64_t seq_id, const int32_t* tokens, int64_t len, int64_t max_new_tokens) {
    const SubmitItem item{seq_id, tokens, len, max_new_tokens};
    submit_many(&item, 1);
}

size_t Dispatcher::submit_many(const SubmitItem* items, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; ++i) check_item(items[i]);
    {
        // Copy only the prefix that fits now: room only grows, except by other producers' submits.
        std::lock_guard<std::mutex> lk(mu_);
        int64_t room = config_.queue_capacity_tokens - queued_tokens_;
        size_t fits = 0;
        while (fits < n && items[fits].len <= room) room -= items[fits++].len;
        if (fits == 0 && started_ && !closing_) {
            ++stats_.backpressure_events;
            throw BackpressureError("queue full: " + std::to_string(queued_tokens_) + " of " +
                                    std::to_string(config_.queue_capacity_tokens) + " tokens waiting");
        }
        n = std::max<size_t>(fits, 1);
    }
    // The one copy of each caller's tokens, made outside the queue lock.
    thread_local std::vector<Pending> copies;  // reused: no allocation per call
    copies.clear();
    for (size_t i = 0; i < n; ++i) {
        copies.push_back({items[i].seq_id, items[i].len, 0.0, pool_.acquire(items[i].len)});
        std::memcpy(copies.back().tokens.data, items[i].tokens, static_cast<size_t>(items[i].len) * sizeof(int32_t));
    }
    std::unique_lock<std::mutex> lk(mu_);
    const bool closed = closing_, not_started = !started_;
    size_t accepted = 0;
    if (!closed && !not_started) {
        const double now = now_s();
        for (; accepted < n && queued_tokens_ + copies[accepted].len <= config_.queue_capacity_tokens; ++accepted) {
            Pending& p = copies[accepted];
            p.arrival_s = now;
            queued_tokens_ += p.len;
            queued_seqs_ += 1;
            arrived_tokens_ += p.len;
            incoming_.push_back(std::move(p));
        }
        stats_.sequences_submitted += static_cast<int64_t>(accepted);
        if (accepted == 0) ++stats_.backpressure_events;
        if (accepted > 0 && (queued_seqs_ == static_cast<int64_t>(accepted) || queued_tokens_ >= window_.wake_tokens() ||
                             queued_seqs_ >= window_.wake_seqs())) {
            kick_locked();
        }
    }
    const int64_t queued = queued_tokens_;
    lk.unlock();
    for (size_t i = accepted; i < n; ++i) pool_.give_back(&copies[i].tokens, 1);
    if (closed) throw ClosedError("dispatcher is closed: submit refused");
    if (not_started) throw NotStartedError("dispatcher not started: call start() first");
    if (accepted == 0) {
        throw BackpressureError("queue full: " + std::to_string(queued) + " of " +
                                std::to_string(config_.queue_capacity_tokens) + " tokens waiting");
    }
    return accepted;
}

bool Dispatcher::wait_for_room(int64_t tokens, std::optional<double> timeout_s) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!started_ && !closing_) throw NotStartedError("dispatcher not started: call start() first");
    auto has_room = [&] { return queued_tokens_ + tokens <= config_.queue_capacity_tokens; };
    auto pred = [&] { return has_room() || closing_ || stop_; };
    ++room_waiters_;
    if (timeout_s) {
        room_cv_.wait_until(lk, deadline_after(*timeout_s), pred);
    } else {
        room_cv_.wait(lk, pred);
    }
    --room_waiters_;
    return has_room() && !closing_ && !stop_;
}

std::optional<BinInfo> Dispatcher::next_bin(std::optional<double> timeout_s) {
    if (timeout_s && std::isnan(*timeout_s)) throw std::invalid_argument("timeout is NaN");
    std::unique_lock<std::mutex> lk(mu_);
    if (!started_ && !closing_) throw NotStartedError("dispatcher not started: call start() first");
    const double now = now_s();
    if (last_handout_s_ >= 0.0) {
        window_.observe_gpu_step(now - last_handout_s_);
        last_handout_s_ = -1.0;
    }
    if (ready_.empty() && !drained_ && !stop_) {
        if (waiting_consumers_++ == 0 && !gpu_wants_bin_) gpu_waiting_since_s_ = now;
        gpu_wants_bin_ = true;
        kick_locked();  // the GPU wants work
        auto pred = [&] { return !ready_.empty() || drained_ || stop_; };
        if (timeout_s) {
            ready_cv_.wait_until(lk, deadline_after(*timeout_s), pred);
        } else {
            ready_cv_.wait(lk, pred);
        }
        --waiting_consumers_;
    }
    if (!ready_.empty()) {
        BinInfo info = ready_.front();
        ready_.pop_front();
        slot_state_[static_cast<size_t>(info.slot)] = SlotState::kHandedOut;
        last_handout_s_ = now_s();
        gpu_wants_bin_ = false;
        return info;
    }
    if (drained_ || stop_ || (closing_ && !started_)) throw ClosedError("dispatcher is closed and drained");
    return std::nullopt;
}

void Dispatcher::release(int slot) {
    std::lock_guard<std::mutex> lk(mu_);
    if (slot < 0 || static_cast<size_t>(slot) >= slots_.size()) {
        throw UnknownSlotError("unknown slot " + std::to_string(slot) + ": slots are 0.." +
                               std::to_string(static_cast<int>(slots_.size()) - 1));
    }
    if (slot_state_[static_cast<size_t>(slot)] != SlotState::kHandedOut) {
        throw UnknownSlotError("slot " + std::to_string(slot) + " is not handed out (already released?)");
    }
    slot_state_[static_cast<size_t>(slot)] = SlotState::kFree;
    free_slots_.push_back(slot);
    packer_cv_.notify_one();
}

void Dispatcher::close() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (closing_) return;
        closing_ = true;
        if (!started_) drained_ = true;
        kick_ = true;
    }
    packer_cv_.notify_all();
    ready_cv_.notify_all();
    room_cv_.notify_all();
}

DispatcherStats Dispatcher::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    DispatcherStats s = stats_;
    s.queue_tokens = queued_tokens_;
    s.queue_seqs = queued_seqs_;
    s.ready_bins = static_cast<int64_t>(ready_.size());
    s.fill_ratio = s.bins ? static_cast<double>(s.tokens_packed) /
                                (static_cast<double>(s.bins) * static_cast<double>(config_.token_budget))
                          : 0.0;
    s.wait_mean_s = s.sequences_packed ? wait_sum_s_ / static_cast<double>(s.sequences_packed) : 0.0;
    s.arrival_rate_tokens_per_s = window_.arrival_rate();
    s.gpu_step_s = window_.gpu_step_s();
    return s;
}

}  // namespace telesum
