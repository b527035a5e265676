#include "window.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace telesum {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

AccumulationWindow::AccumulationWindow(const WindowConfig& config) : config_(config) {
    if (config.token_budget <= 0) throw std::invalid_argument("token_budget must be positive");
    if (!(config.latency_cap_s > 0.0)) throw std::invalid_argument("latency_cap_s must be positive");
    if (config.fixed_max_seqs <= 0) throw std::invalid_argument("fixed_max_seqs must be positive");
    if (!(config.fixed_max_wait_s > 0.0)) throw std::invalid_argument("fixed_max_wait_s must be positive");
    if (config.idle_fraction < 0.0) throw std::invalid_argument("idle_fraction must be >= 0");
    if (!(config.rate_tau_s > 0.0)) throw std::invalid_argument("rate_tau_s must be positive");
}

void AccumulationWindow::observe_arrivals(double now_s, int64_t tokens) {
    // Exponentially decayed count / tau: the arrival rate over roughly the last tau seconds.
    if (std::isnan(last_arrival_s_)) {
        last_arrival_s_ = now_s;
    }
    const double dt = std::max(0.0, now_s - last_arrival_s_);
    rate_tokens_per_s_ = rate_tokens_per_s_ * std::exp(-dt / config_.rate_tau_s) +
                         static_cast<double>(tokens) / config_.rate_tau_s;
    last_arrival_s_ = std::max(last_arrival_s_, now_s);
}

void AccumulationWindow::observe_gpu_step(double step_s) {
    if (!(step_s >= 0.0)) return;
    step_s_ = step_s_ == 0.0 ? step_s : 0.8 * step_s_ + 0.2 * step_s;
}

int64_t AccumulationWindow::wake_seqs() const {
    return config_.adaptive ? std::numeric_limits<int64_t>::max() : config_.fixed_max_seqs;
}

WindowDecision AccumulationWindow::decide_fixed(double now_s, int64_t pending_seqs,
                                                double oldest_arrival_s) const {
    const double wait_s = std::min(config_.fixed_max_wait_s, config_.latency_cap_s);
    if (pending_seqs >= config_.fixed_max_seqs || now_s >= oldest_arrival_s + wait_s) {
        return {PackAction::kPackAll, kInf};
    }
    return {PackAction::kWait, oldest_arrival_s + wait_s};
}

WindowDecision AccumulationWindow::decide(double now_s, int64_t pending_tokens, int64_t pending_seqs,
                                          double oldest_arrival_s, double gpu_waiting_since_s) const {
    if (pending_seqs <= 0) return {PackAction::kWait, kInf};
    if (!config_.adaptive) return decide_fixed(now_s, pending_seqs, oldest_arrival_s);
    if (pending_tokens >= config_.token_budget) return {PackAction::kPackFull, kInf};
    const double cap_at = oldest_arrival_s + config_.latency_cap_s;
    if (now_s >= cap_at) return {PackAction::kPackAll, kInf};
    if (std::isnan(gpu_waiting_since_s)) return {PackAction::kWait, cap_at};  // GPU busy: accumulate
    // The GPU is idle. Hold only if the bin is expected to fill within the idle allowance.
    const double idle_until =
        gpu_waiting_since_s + config_.idle_fraction * std::max(step_s_, config_.latency_cap_s);
    if (rate_tokens_per_s_ > 0.0 && idle_until > now_s) {
        const double fill_at =
            now_s + static_cast<double>(config_.token_budget - pending_tokens) / rate_tokens_per_s_;
        if (fill_at <= std::min(idle_until, cap_at)) return {PackAction::kWait, fill_at};
    }
    return {PackAction::kPackOne, kInf};
}

}  // namespace telesum
