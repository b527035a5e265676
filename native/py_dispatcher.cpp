#include "py_dispatcher.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

namespace py = pybind11;

namespace telesum {

namespace {

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
}

// Releases the GIL around a call into the dispatcher. A daemon thread still inside such a call
// when the interpreter finalizes (e.g. the GPU loop in next_bin at exit) must not die in a
// noexcept frame: CPython before 3.14 ends a thread that takes the GIL back during finalization
// with pthread_exit, whose forced unwind through a noexcept destructor (pybind11's
// gil_scoped_release) aborts the process with "terminate called without an active exception".
// So this destructor may unwind (noexcept(false)), and a thread that returns once finalization
// has begun parks instead of taking the GIL, as CPython 3.14 does itself; the process exit ends
// it. Only `without_gil` uses it, so no C++ exception is in flight while it is destroyed.
class GilRelease {
public:
    GilRelease() : state_(PyEval_SaveThread()) {}
    ~GilRelease() noexcept(false) {
        if (interpreter_finalizing()) {
            for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        }
        PyEval_RestoreThread(state_);
    }
    GilRelease(const GilRelease&) = delete;
    GilRelease& operator=(const GilRelease&) = delete;

private:
    PyThreadState* state_;
};

// Runs f() with the GIL released; an exception from f is rethrown once the GIL is held again.
template <typename F>
auto without_gil(F&& f) -> decltype(f()) {
    using R = decltype(f());
    std::exception_ptr error;
    if constexpr (std::is_void_v<R>) {
        {
            GilRelease nogil;
            try {
                f();
            } catch (...) {
                error = std::current_exception();
            }
        }
        if (error) std::rethrow_exception(error);
    } else {
        std::optional<R> out;
        {
            GilRelease nogil;
            try {
                out.emplace(f());
            } catch (...) {
                error = std::current_exception();
            }
        }
        if (error) std::rethrow_exception(error);
        return std::move(*out);
    }
}

// Releases a Py_buffer on scope exit; must be destroyed with the GIL held.
struct BufferGuard {
    Py_buffer view{};
    bool held = false;
    ~BufferGuard() {
        if (held) PyBuffer_Release(&view);
    }
};

bool is_int_format(const char* fmt, Py_ssize_t itemsize, Py_ssize_t want) {
    if (itemsize != want || fmt == nullptr) return false;
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') ++fmt;
    if (fmt[0] == '\0' || fmt[1] != '\0') return false;
    return fmt[0] == 'i' || fmt[0] == 'l' || fmt[0] == 'q';  // size checked above
}

template <typename T>
T* slot_array(const py::object& obj, const char* name, int64_t want_len, std::vector<py::object>& refs) {
    py::buffer_info info;
    try {
        info = py::reinterpret_borrow<py::buffer>(obj).request(true);
    } catch (const py::error_already_set&) {
        throw py::value_error(std::string("slot array ") + name + " must be a writable buffer (numpy array)");
    }
    if (!is_int_format(info.format.c_str(), info.itemsize, sizeof(T))) {
        throw py::type_error(std::string("slot array ") + name + " must be int" + std::to_string(8 * sizeof(T)) +
                             ", got format '" + info.format + "'");
    }
    if (info.ndim != 1 || info.shape[0] < want_len || info.strides[0] != static_cast<py::ssize_t>(sizeof(T))) {
        throw py::value_error(std::string("slot array ") + name + " must be 1-D, contiguous, at least " +
                              std::to_string(want_len) + " long");
    }
    refs.push_back(obj);
    return static_cast<T*>(info.ptr);
}

}  // namespace

PyDispatcher::PyDispatcher(const DispatcherConfig& config) : dispatcher_(std::make_unique<Dispatcher>(config)) {}

PyDispatcher::~PyDispatcher() {
    py::gil_scoped_release nogil;  // the join waits for the packing thread's current round
    dispatcher_.reset();
}

int PyDispatcher::add_slot(py::object input_ids, py::object position_ids, py::object cu_seqlens, py::object seq_ids,
                           py::object seq_lens, py::object last_token_index) {
    const DispatcherConfig& c = dispatcher_->config();
    std::vector<py::object> refs;
    SlotBuffers b;
    b.input_ids = slot_array<int32_t>(input_ids, "input_ids", c.token_budget, refs);
    b.position_ids = slot_array<int32_t>(position_ids, "position_ids", c.token_budget, refs);
    b.cu_seqlens = slot_array<int32_t>(cu_seqlens, "cu_seqlens", c.max_seqs_per_bin + 1, refs);
    b.seq_ids = slot_array<int64_t>(seq_ids, "seq_ids", c.max_seqs_per_bin, refs);
    b.seq_lens = slot_array<int32_t>(seq_lens, "seq_lens", c.max_seqs_per_bin, refs);
    b.last_token_index = slot_array<int32_t>(last_token_index, "last_token_index", c.max_seqs_per_bin, refs);
    const int slot = dispatcher_->add_slot(b);
    slot_refs_.insert(slot_refs_.end(), refs.begin(), refs.end());
    return slot;
}

void PyDispatcher::start() { dispatcher_->start(); }

namespace {

// Borrows one tokens buffer; `gathered` receives a copy when the buffer is strided.
const int32_t* borrow_tokens(py::handle tokens, Py_buffer& view, std::vector<int32_t>& gathered) {
    if (PyObject_GetBuffer(tokens.ptr(), &view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        throw py::type_error(std::string("tokens must be a 1-D int32 array, got ") + Py_TYPE(tokens.ptr())->tp_name);
    }
    if (!is_int_format(view.format, view.itemsize, 4)) {
        const std::string fmt = view.format ? view.format : "B";
        const auto itemsize = view.itemsize;
        PyBuffer_Release(&view);
        throw py::type_error("tokens must be int32, got buffer format '" + fmt + "' of " + std::to_string(itemsize) +
                             "-byte items");
    }
    if (view.ndim != 1) {
        const int ndim = view.ndim;
        PyBuffer_Release(&view);
        throw py::value_error("tokens must be 1-D, got " + std::to_string(ndim) + " dimensions");
    }
    const int64_t len = view.shape[0];
    if (view.strides[0] == 4 || len == 0) return static_cast<const int32_t*>(view.buf);
    gathered.resize(static_cast<size_t>(len));
    const char* base = static_cast<const char*>(view.buf);
    for (int64_t i = 0; i < len; ++i) std::memcpy(&gathered[static_cast<size_t>(i)], base + i * view.strides[0], 4);
    return gathered.data();
}

}  // namespace

void PyDispatcher::submit(int64_t seq_id, py::handle tokens, int64_t max_new_tokens) {
    BufferGuard g;
    std::vector<int32_t> gathered;  // only for strided input
    const int32_t* data = borrow_tokens(tokens, g.view, gathered);
    g.held = true;
    const int64_t len = g.view.shape[0];
    without_gil([&] { dispatcher_->submit(seq_id, data, len, max_new_tokens); });
}

size_t PyDispatcher::submit_many(py::sequence seq_ids, py::sequence tokens, int64_t max_new_tokens) {
    const size_t n = py::len(tokens);
    if (py::len(seq_ids) != n) throw py::value_error("seq_ids and tokens differ in length");
    std::vector<BufferGuard> guards(n);
    std::vector<std::vector<int32_t>> gathered(n);
    std::vector<Dispatcher::SubmitItem> items(n);
    for (size_t i = 0; i < n; ++i) {
        items[i].tokens = borrow_tokens(tokens[i], guards[i].view, gathered[i]);
        guards[i].held = true;
        items[i].len = guards[i].view.shape[0];
        items[i].seq_id = seq_ids[i].cast<int64_t>();
        items[i].max_new_tokens = max_new_tokens;
    }
    return without_gil([&] { return dispatcher_->submit_many(items.data(), n); });
}

bool PyDispatcher::wait_for_room(int64_t tokens, std::optional<double> timeout_s) {
    return without_gil([&] { return dispatcher_->wait_for_room(tokens, timeout_s); });
}

py::object PyDispatcher::next_bin(std::optional<double> timeout_s) {
    // A poll (timeout 0), what the GPU loop does between steps while sequences decode, keeps the GIL:
    // it only takes the dispatcher's lock, which no thread holds while it waits for the GIL (the
    // packing thread never takes the GIL; callers release it before locking). Given up, the GIL
    // costs the GPU loop up to the interpreter's switch interval to take back whenever another
    // thread is running Python.
    const bool poll = timeout_s && *timeout_s == 0.0;
    const std::optional<BinInfo> info =
        poll ? dispatcher_->next_bin(timeout_s) : without_gil([&] { return dispatcher_->next_bin(timeout_s); });
    if (!info) return py::none();
    return py::make_tuple(info->slot, info->num_seqs, info->num_tokens, info->num_real_tokens);
}

void PyDispatcher::release(int slot) {
    without_gil([&] { dispatcher_->release(slot); });
}

void PyDispatcher::close() {
    without_gil([&] { dispatcher_->close(); });
}

py::dict PyDispatcher::stats() const {
    const DispatcherStats s = without_gil([&] { return dispatcher_->stats(); });
    py::dict d;
    d["sequences_submitted"] = s.sequences_submitted;
    d["sequences_packed"] = s.sequences_packed;
    d["tokens_packed"] = s.tokens_packed;
    d["pad_tokens"] = s.pad_tokens;
    d["bins"] = s.bins;
    d["rounds"] = s.rounds;
    d["backpressure_events"] = s.backpressure_events;
    d["queue_tokens"] = s.queue_tokens;
    d["queue_seqs"] = s.queue_seqs;
    d["ready_bins"] = s.ready_bins;
    d["fill_ratio"] = s.fill_ratio;
    d["wait_mean_s"] = s.wait_mean_s;
    d["wait_max_s"] = s.wait_max_s;
    d["arrival_rate_tokens_per_s"] = s.arrival_rate_tokens_per_s;
    d["gpu_step_s"] = s.gpu_step_s;
    return d;
}

std::vector<std::vector<int32_t>> ffd_pack(const std::vector<int64_t>& spans, int64_t token_budget,
                                           int64_t max_seqs_per_bin, int64_t num_first) {
    if (num_first < 0) throw py::value_error("num_first must be >= 0");
    FfdPacker packer(token_budget, max_seqs_per_bin);
    packer.pack(spans.data(), spans.size(), static_cast<size_t>(num_first));
    std::vector<std::vector<int32_t>> bins(packer.num_bins());
    for (size_t b = 0; b < bins.size(); ++b) {
        bins[b].assign(packer.bin_items() + packer.bin_begin(b), packer.bin_items() + packer.bin_end(b));
    }
    return bins;
}

}  // namespace telesum
