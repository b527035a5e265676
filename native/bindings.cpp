// Python bindings for the packing dispatcher: only PYBIND11_MODULE lives here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>

#include "py_dispatcher.h"
#include "window.h"

namespace py = pybind11;
using namespace telesum;

PYBIND11_MODULE(_native, m) {
    m.doc() = "telesum native packing dispatcher";

    py::register_exception<BackpressureError>(m, "Backpressure", PyExc_RuntimeError);
    py::register_exception<ClosedError>(m, "DispatcherClosed", PyExc_RuntimeError);
    py::register_exception<NotStartedError>(m, "DispatcherNotStarted", PyExc_RuntimeError);
    py::register_exception<SequenceTooLongError>(m, "SequenceTooLong", PyExc_ValueError);
    py::register_exception<UnknownSlotError>(m, "UnknownSlot", PyExc_ValueError);

    m.def("dispatcher_defaults", [] {
        const DispatcherConfig c;
        py::dict d;
        d["token_budget"] = c.token_budget;
        d["alignment"] = c.alignment;
        d["max_seqs_per_bin"] = c.max_seqs_per_bin;
        d["queue_capacity_tokens"] = c.queue_capacity_tokens;
        d["latency_cap_s"] = c.latency_cap_s;
        return d;
    }, "The packing defaults of DispatcherConfig (dispatcher.h), the native home of these values.");

    py::class_<PyDispatcher>(m, "Dispatcher")
        .def(py::init([](int64_t token_budget, int64_t alignment, int64_t max_seqs_per_bin,
                         int64_t queue_capacity_tokens, int32_t pad_id, double latency_cap_s, bool adaptive) {
                 DispatcherConfig c;
                 c.token_budget = token_budget;
                 c.alignment = alignment;
                 c.max_seqs_per_bin = max_seqs_per_bin;
                 c.queue_capacity_tokens = queue_capacity_tokens;
                 c.pad_id = pad_id;
                 c.latency_cap_s = latency_cap_s;
                 c.adaptive = adaptive;
                 return new PyDispatcher(c);
             }),
             py::arg("token_budget") = DispatcherConfig{}.token_budget,
             py::arg("alignment") = DispatcherConfig{}.alignment,
             py::arg("max_seqs_per_bin") = DispatcherConfig{}.max_seqs_per_bin,
             py::arg("queue_capacity_tokens") = DispatcherConfig{}.queue_capacity_tokens, py::arg("pad_id") = 0,
             py::arg("latency_cap_s") = DispatcherConfig{}.latency_cap_s, py::arg("adaptive") = true)
        .def("add_slot", &PyDispatcher::add_slot, py::arg("input_ids"), py::arg("position_ids"),
             py::arg("cu_seqlens"), py::arg("seq_ids"), py::arg("seq_lens"), py::arg("last_token_index"))
        .def("start", &PyDispatcher::start)
        .def("submit", &PyDispatcher::submit, py::arg("seq_id"), py::arg("tokens"), py::arg("max_new_tokens"))
        .def("submit_many", &PyDispatcher::submit_many, py::arg("seq_ids"), py::arg("tokens"),
             py::arg("max_new_tokens"))
        .def("wait_for_room", &PyDispatcher::wait_for_room, py::arg("tokens"), py::arg("timeout") = py::none())
        .def("next_bin", &PyDispatcher::next_bin, py::arg("timeout") = py::none())
        .def("release", &PyDispatcher::release, py::arg("slot"))
        .def("close", &PyDispatcher::close)
        .def("stats", &PyDispatcher::stats)
        .def_property_readonly("num_slots", &PyDispatcher::num_slots)
        .def_property_readonly("token_budget", [](const PyDispatcher& d) { return d.config().token_budget; })
        .def_property_readonly("alignment", [](const PyDispatcher& d) { return d.config().alignment; })
        .def_property_readonly("max_seqs_per_bin", [](const PyDispatcher& d) { return d.config().max_seqs_per_bin; })
        .def_property_readonly("pad_id", [](const PyDispatcher& d) { return d.config().pad_id; });

    py::class_<AccumulationWindow>(m, "AccumulationWindow")
        .def(py::init([](int64_t token_budget, double latency_cap_s, bool adaptive, int64_t fixed_max_seqs,
                         double fixed_max_wait_s, double idle_fraction, double rate_tau_s) {
                 WindowConfig c;
                 c.token_budget = token_budget;
                 c.latency_cap_s = latency_cap_s;
                 c.adaptive = adaptive;
                 c.fixed_max_seqs = fixed_max_seqs;
                 c.fixed_max_wait_s = fixed_max_wait_s;
                 c.idle_fraction = idle_fraction;
                 c.rate_tau_s = rate_tau_s;
                 return AccumulationWindow(c);
             }),
             py::arg("token_budget") = DispatcherConfig{}.token_budget,
             py::arg("latency_cap_s") = DispatcherConfig{}.latency_cap_s, py::arg("adaptive") = true,
             py::arg("fixed_max_seqs") = WindowConfig{}.fixed_max_seqs,
             py::arg("fixed_max_wait_s") = WindowConfig{}.fixed_max_wait_s,
             py::arg("idle_fraction") = WindowConfig{}.idle_fraction, py::arg("rate_tau_s") = WindowConfig{}.rate_tau_s)
        .def("observe_arrivals", &AccumulationWindow::observe_arrivals, py::arg("now"), py::arg("tokens"))
        .def("observe_gpu_step", &AccumulationWindow::observe_gpu_step, py::arg("step_s"))
        .def(
            "decide",
            [](const AccumulationWindow& w, double now, int64_t pending_tokens, int64_t pending_seqs,
               double oldest_arrival, std::optional<double> gpu_waiting_since) {
                const WindowDecision d =
                    w.decide(now, pending_tokens, pending_seqs, oldest_arrival,
                             gpu_waiting_since.value_or(std::numeric_limits<double>::quiet_NaN()));
                static const char* names[] = {"wait", "pack_full", "pack_all", "pack_one"};
                return py::make_tuple(names[static_cast<int>(d.action)], d.wake_at_s);
            },
            py::arg("now"), py::arg("pending_tokens"), py::arg("pending_seqs"), py::arg("oldest_arrival"),
            py::arg("gpu_waiting_since") = py::none())
        .def_property_readonly("arrival_rate", &AccumulationWindow::arrival_rate)
        .def_property_readonly("gpu_step_s", &AccumulationWindow::gpu_step_s);

    m.def("ffd_pack", &ffd_pack, py::arg("spans"), py::arg("token_budget"), py::arg("max_seqs_per_bin"),
          py::arg("num_first") = 0,
          "First-fit-decreasing over aligned spans (items 0..num_first-1 placed first, in order); the "
          "item indices of each bin, in placement order.");
}
