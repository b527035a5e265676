// The packing dispatcher: sequences in, padding-free bins out, written once into caller-owned slots.
//
// Threads and who calls what:
//  - ingest threads (any number): submit(), wait_for_room().
//  - the packing thread (owned here, started by start()): absorbs submitted sequences, asks the
//    accumulation window when to pack, runs first-fit-decreasing and writes bins into free slots.
//    It never touches Python objects; it reads only the token copies made by submit() and writes
//    only into slots it has taken from the free list.
//  - the GPU loop (one or more threads): next_bin(), release().
//  - the owner: add_slot() and start() before any other call, close(), the destructor.
//
// Locking: one mutex, mu_, protects every member marked (mu_); the packing thread holds it only
// to swap the incoming list, take slots and publish bins, never while sorting or copying tokens.
// Invariants under mu_: queued_tokens_/queued_seqs_ count exactly the sequences submitted and not
// yet in a published bin (incoming_ plus the packing thread's carried list); a slot is in exactly
// one of free_slots_, "being written" (packing thread), ready_ or handed out (GPU loop).
// Each condition variable waits with a predicate that includes stop_.
//
// Blocking: submit() never blocks (it raises BackpressureError when the queue is full);
// wait_for_room() and next_bin() block up to their timeout. The Python bindings release the GIL
// around every call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ffd.h"
#include "token_pool.h"
#include "window.h"

namespace telesum {

struct BackpressureError : std::runtime_error { using std::runtime_error::runtime_error; };
struct ClosedError : std::runtime_error { using std::runtime_error::runtime_error; };
struct NotStartedError : std::runtime_error { using std::runtime_error::runtime_error; };
struct SequenceTooLongError : std::invalid_argument { using std::invalid_argument::invalid_argument; };
struct UnknownSlotError : std::invalid_argument { using std::invalid_argument::invalid_argument; };

// The native home of the packing defaults; worker/settings/budgets.py holds the same values for
// Python and tests/settings/test_budgets.py checks they agree (through dispatcher_defaults()).
struct DispatcherConfig {
    int64_t token_budget = 65536;
    int64_t alignment = 16;
    int64_t max_seqs_per_bin = 1024;
    int64_t queue_capacity_tokens = 4 * 65536;
    int32_t pad_id = 0;
    double latency_cap_s = 0.5;
    bool adaptive = true;
};

// One slot's arrays; the memory belongs to the caller and must outlive the dispatcher.
struct SlotBuffers {
    int32_t* input_ids = nullptr;         // [token_budget]
    int32_t* position_ids = nullptr;      // [token_budget]
    int32_t* cu_seqlens = nullptr;        // [max_seqs_per_bin + 1]
    int64_t* seq_ids = nullptr;           // [max_seqs_per_bin]
    int32_t* seq_lens = nullptr;          // [max_seqs_per_bin]
    int32_t* last_token_index = nullptr;  // [max_seqs_per_bin]
};

struct BinInfo {
    int slot = -1;
    int64_t num_seqs = 0;
    int64_t num_tokens = 0;       // sum of aligned spans = cu_seqlens[num_seqs]
    int64_t num_real_tokens = 0;  // sum of seq_lens
};

struct DispatcherStats {
    int64_t sequences_submitted = 0;
    int64_t sequences_packed = 0;
    int64_t tokens_packed = 0;      // real tokens
    int64_t pad_tokens = 0;         // alignment pads inside spans
    int64_t bins = 0;
    int64_t rounds = 0;             // packing rounds (FFD runs)
    int64_t backpressure_events = 0;
    int64_t queue_tokens = 0;       // waiting now
    int64_t queue_seqs = 0;
    int64_t ready_bins = 0;
    double fill_ratio = 0.0;        // tokens_packed / (bins * token_budget)
    double wait_mean_s = 0.0;       // submit -> bin published
    double wait_max_s = 0.0;
    double arrival_rate_tokens_per_s = 0.0;
    double gpu_step_s = 0.0;
};

class Dispatcher {
public:
    explicit Dispatcher(const DispatcherConfig& config);
    // Stops and joins the packing thread; sequences still queued are dropped. Owner thread.
    ~Dispatcher();
    Dispatcher(const Dispatcher&) = delete;
    Dispatcher& operator=(const Dispatcher&) = delete;

    // Registers one slot; returns its index. Only before start(), from the owner thread.
    int add_slot(const SlotBuffers& buffers);
    // Starts the packing thread (needs two or more slots). Once, from the owner thread.
    void start();

    // Copies `len` tokens and queues them. Raises NotStartedError, ClosedError, BackpressureError
    // (queue full: retry later), SequenceTooLongError (aligned span > token_budget),
    // std::invalid_argument (empty sequence, negative max_new_tokens). `max_new_tokens` is checked,
    // not carried into the bin: the engine holds each sequence's limit. Never blocks. Thread-safe.
    void submit(int64_t seq_id, const int32_t* tokens, int64_t len, int64_t max_new_tokens);
    struct SubmitItem {
        int64_t seq_id;
        const int32_t* tokens;
        int64_t len;
        int64_t max_new_tokens;
    };
    // Submits items in order under one lock; returns how many (a prefix) fit in the queue. Checks
    // every item first (same errors as submit(), nothing queued on error); raises BackpressureError
    // only when not even the first fits. Never blocks. Thread-safe.
    size_t submit_many(const SubmitItem* items, size_t n);
    // Waits until `tokens` more would fit in the queue; false on timeout or once closed. Thread-safe.
    bool wait_for_room(int64_t tokens, std::optional<double> timeout_s);

    // Waits up to timeout (forever if empty) for a packed bin; nullopt on timeout. Asking is the
    // "GPU wants work" signal; it holds until a bin is handed out, so a zero-timeout peek gets the
    // pending sequences packed for its next ask. Raises ClosedError once closed and drained, NotStartedError before
    // start(). Thread-safe; the slot belongs to the caller until release().
    std::optional<BinInfo> next_bin(std::optional<double> timeout_s);
    // Returns a handed-out slot for reuse. Raises UnknownSlotError for a slot that does not exist
    // or is not handed out. Thread-safe.
    void release(int slot);

    // Refuses new sequences; the packing thread packs everything queued, then next_bin() raises
    // ClosedError once the last bin has been taken. Returns at once; idempotent. Thread-safe.
    void close();

    DispatcherStats stats() const;  // Thread-safe.
    const DispatcherConfig& config() const { return config_; }  // Immutable.
    int num_slots() const;  // Thread-safe.

private:
    struct Pending {
        int64_t seq_id;
        int64_t len;
        double arrival_s;
        TokenPool::Block tokens;  // the submit-time copy, read once into a slot, then given back
    };
    enum class SlotState { kFree, kWriting, kReady, kHandedOut };

    double now_s() const;
    void check_item(const SubmitItem& item) const;
    void run();                                  // the packing thread
    void pack_round_unlocked(PackAction action, int free_slots);  // packing thread, mu_ not held
    void write_bin(size_t bin, int slot, BinInfo& info) const;    // packing thread, mu_ not held
    void kick_locked();                          // wake the packing thread

    const DispatcherConfig config_;
    const std::chrono::steady_clock::time_point epoch_;
    std::vector<int32_t> iota_;  // 0..token_budget-1, copied into position_ids

    mutable std::mutex mu_;
    std::condition_variable packer_cv_;  // packing thread: kick_ || stop_
    std::condition_variable ready_cv_;   // GPU loop: !ready_.empty() || drained_ || stop_
    std::condition_variable room_cv_;    // ingest: room || closing_ || stop_

    bool started_ = false;                // (mu_)
    bool closing_ = false;                // (mu_) no more submits
    bool drained_ = false;                // (mu_) closing_ and every sequence published
    bool stop_ = false;                   // (mu_) destructor: leave now
    bool kick_ = false;                   // (mu_) re-decide now
    bool packer_idle_ = false;            // (mu_) packing thread is waiting for a kick
    std::vector<Pending> incoming_;       // (mu_) submitted, not yet absorbed, arrival order
    int64_t queued_tokens_ = 0;           // (mu_)
    int64_t queued_seqs_ = 0;             // (mu_)
    int64_t arrived_tokens_ = 0;          // (mu_) total ever submitted
    double oldest_carried_s_ = 0.0;       // (mu_) arrival of the oldest carried sequence
    int waiting_consumers_ = 0;           // (mu_)
    double gpu_waiting_since_s_ = 0.0;    // (mu_) valid while waiting_consumers_ > 0 or gpu_wants_bin_
    // (mu_) a next_bin() found nothing ready and no bin has been handed out since: the GPU side
    // still wants work though it stopped waiting (a zero-timeout peek between decode steps), so
    // the window packs for it as for a waiting consumer instead of holding until the latency cap.
    bool gpu_wants_bin_ = false;
    double last_handout_s_ = -1.0;        // (mu_)
    int room_waiters_ = 0;                // (mu_)
    std::vector<SlotBuffers> slots_;      // (mu_ to resize; fixed after start)
    std::vector<SlotState> slot_state_;   // (mu_)
    std::vector<int> free_slots_;         // (mu_)
    std::deque<BinInfo> ready_;           // (mu_) published, not yet handed out
    AccumulationWindow window_;           // (mu_)
    DispatcherStats stats_;               // (mu_) cumulative part
    double wait_sum_s_ = 0.0;             // (mu_)

    TokenPool pool_;  // thread-safe on its own

    // Packing thread only.
    FfdPacker packer_;
    std::vector<TokenPool::Block> done_blocks_;
    std::vector<int> round_slots_;
    std::vector<BinInfo> round_infos_;
    std::vector<Pending> carried_;        // absorbed, not yet in a bin, arrival order
    std::vector<Pending> absorb_buf_;
    std::vector<int64_t> spans_;
    std::vector<Pending> keep_buf_;
    std::vector<char> emitted_;

    std::thread thread_;
};

}  // namespace telesum
