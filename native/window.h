// The accumulation window: when should pending sequences be packed into bins?
//
// A pure decision object driven by explicit timestamps (seconds, any origin), so the dispatcher
// drives it with the steady clock and a test drives it in simulated time. It owns no lock and no
// thread: the dispatcher calls it only from the packing thread, under its queue mutex.
//
// Two rules:
//  - fixed (the seed's): pack everything once `fixed_max_seqs` sequences wait or the oldest has
//    waited `fixed_max_wait_s`, whether or not the GPU can take the bin.
//  - adaptive: pack a full bin's worth as soon as it waits; pack everything when the oldest
//    sequence hits `latency_cap_s`; otherwise hold sequences while the GPU is busy (a bin packed
//    now would only sit in a slot, and later arrivals could no longer join it); when the GPU asks
//    for work, pack one bin at once unless the observed arrival rate fills it within a short idle
//    allowance and inside the latency budget.
#pragma once

#include <cstdint>
#include <limits>

namespace telesum {

enum class PackAction : int {
    kWait = 0,     // keep accumulating until `wake_at_s` or a wake threshold is crossed
    kPackFull = 1, // emit the bins that are full; carry the last, partly filled one
    kPackAll = 2,  // emit every bin (as free slots allow)
    kPackOne = 3,  // the GPU asked: emit the first (fullest) bin, carry the rest
};

struct WindowDecision {
    PackAction action = PackAction::kWait;
    double wake_at_s = std::numeric_limits<double>::infinity();  // re-decide no later than this
};

struct WindowConfig {
    // No defaults here: the dispatcher sets both from DispatcherConfig (dispatcher.h); the
    // constructor refuses a zero.
    int64_t token_budget = 0;
    double latency_cap_s = 0.0;
    bool adaptive = true;
    int64_t fixed_max_seqs = 16;       // the seed's rule
    double fixed_max_wait_s = 0.005;   // the seed's rule
    // Idle GPU time we accept to fill a bin, as a fraction of the larger of the observed GPU step
    // time and the latency cap: a step has a fixed cost, so merging the next arrivals into this bin
    // saves part of the next step, and the cap is the delay the operator already accepts.
    double idle_fraction = 0.25;
    // Time constant of the arrival-rate and step-time estimates: long enough to smooth Poisson
    // noise over a few bins, short enough to follow a burst.
    double rate_tau_s = 0.2;
};

class AccumulationWindow {
public:
    explicit AccumulationWindow(const WindowConfig& config);

    // `tokens` more tokens arrived by `now_s` (call with the count since the last call).
    void observe_arrivals(double now_s, int64_t tokens);
    // The GPU finished using a bin `step_s` seconds after it got it.
    void observe_gpu_step(double step_s);

    // What to do now, given the pending queue. `oldest_arrival_s` is ignored when nothing waits;
    // `gpu_waiting_since_s` is when the GPU side started asking for work, NaN while it is busy.
    WindowDecision decide(double now_s, int64_t pending_tokens, int64_t pending_seqs,
                          double oldest_arrival_s, double gpu_waiting_since_s) const;

    // Sequence/tokens counts at which a submit should wake the packing thread early.
    int64_t wake_seqs() const;
    int64_t wake_tokens() const { return config_.token_budget; }

    double arrival_rate() const { return rate_tokens_per_s_; }  // tokens/s, decayed average
    double gpu_step_s() const { return step_s_; }               // 0 until observed
    const WindowConfig& config() const { return config_; }

private:
    WindowDecision decide_fixed(double now_s, int64_t pending_seqs, double oldest_arrival_s) const;

    WindowConfig config_;
    double rate_tokens_per_s_ = 0.0;
    double last_arrival_s_ = std::numeric_limits<double>::quiet_NaN();
    double step_s_ = 0.0;
};

}  // namespace telesum
